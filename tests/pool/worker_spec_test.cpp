// Worker specs: the one grammar of kloop run --workers, the start page and workers.json (kernels/pool/worker_spec.h).
#include "core/errors.h"
#include "kernels/pool/worker_spec.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <gtest/gtest.h>

namespace fs = std::filesystem;
using namespace kl;

namespace {

std::string errorOf(const std::string& specs)
{
    try {
        parseWorkerSpecs(specs);
    } catch (const InputError& e) {
        return e.what();
    }
    return "(no error)";
}

fs::path writeFile(const std::string& name, const std::string& text)
{
    const fs::path p = fs::temp_directory_path() / ("kl-worker-spec-" + std::to_string(::getpid()) + "-" + name);
    std::ofstream(p) << text;
    return p;
}

bool contains(const std::vector<std::string>& argv, const std::string& word)
{
    return std::find(argv.begin(), argv.end(), word) != argv.end();
}

} // namespace

TEST(WorkerSpec, ParsesEveryKind)
{
    const auto w = parseWorkerSpecs("local,local:3,ssh:me@gpu-box,ssh:gpu-box:1,ssh:gpu-box:2222:0,slurm:gpu:3");
    ASSERT_EQ(w.size(), 8u);
    EXPECT_EQ(w[0].kind, WorkerSpec::Kind::Local);
    EXPECT_FALSE(w[0].gpu);
    EXPECT_EQ(w[1].id, "local:3");
    EXPECT_EQ(*w[1].gpu, 3);
    EXPECT_EQ(w[2].kind, WorkerSpec::Kind::Ssh);
    EXPECT_EQ(w[2].host, "me@gpu-box");
    EXPECT_EQ(w[2].port, 0);
    EXPECT_EQ(*w[3].gpu, 1);
    EXPECT_EQ(w[4].port, 2222);
    EXPECT_EQ(*w[4].gpu, 0);
    EXPECT_EQ(w[5].kind, WorkerSpec::Kind::Slurm);
    EXPECT_EQ(w[5].partition, "gpu");
    EXPECT_EQ(w[5].id, "slurm:gpu#1");
    EXPECT_EQ(w[7].id, "slurm:gpu#3");
    EXPECT_TRUE(w[7].remote());
    EXPECT_FALSE(w[0].remote());
    const auto spaced = parseWorkerSpecs(" local:0 , ssh:gpu-box:1\t");
    ASSERT_EQ(spaced.size(), 2u) << "blanks around an item are not part of it";
    EXPECT_EQ(spaced[1].id, "ssh:gpu-box:1");
    EXPECT_NE(errorOf("local, ,ssh:box").find("an empty item"), std::string::npos);
}

TEST(WorkerSpec, BadSpecsNameTheSpec)
{
    EXPECT_NE(errorOf("local:x").find("worker spec 'local:x': the GPU index"), std::string::npos) << errorOf("local:x");
    EXPECT_NE(errorOf("ssh:").find("worker spec 'ssh:'"), std::string::npos);
    EXPECT_NE(errorOf("ssh:-oProxyCommand=x").find("is not a host name"), std::string::npos)
        << "an ssh option is never taken for a host";
    EXPECT_NE(errorOf("ssh:box:70000:1").find("the port must be 1-65535"), std::string::npos);
    EXPECT_NE(errorOf("slurm:gpu:0").find("the worker count must be 1-1024"), std::string::npos);
    EXPECT_NE(errorOf("cloud:x").find("unknown kind 'cloud'"), std::string::npos);
    EXPECT_NE(errorOf("local,,ssh:box").find("an empty item"), std::string::npos);
    EXPECT_NE(errorOf("local:1,local:1").find("'local:1' is given twice"), std::string::npos);
    EXPECT_NE(errorOf("/nonexistent/w.json").find("/nonexistent/w.json: cannot read"), std::string::npos);
}

TEST(WorkerSpec, WorkersFileAddsOptionsAndNamesBadFields)
{
    const auto good = writeFile("good.json", R"({"workers": [
        {"spec": "ssh:box:1", "ssh_options": ["-i", "/k"], "worker": "/opt/kl/kloop-worker",
         "environment": {"KL_X": "1"}, "heartbeat_seconds": 2},
        {"spec": "slurm:a100:2", "login": "login1", "srun_options": ["--time=1:00:00"]}]})");
    const auto w = parseWorkerSpecs(good.string() + ",local");
    ASSERT_EQ(w.size(), 4u);
    EXPECT_EQ(w[0].sshOptions, (std::vector<std::string> { "-i", "/k" }));
    EXPECT_EQ(w[0].worker, "/opt/kl/kloop-worker");
    EXPECT_EQ(w[0].environment.at("KL_X"), "1");
    EXPECT_DOUBLE_EQ(w[0].heartbeatSeconds, 2);
    EXPECT_EQ(w[2].login, "login1");
    EXPECT_EQ(w[2].id, "slurm:a100#2");
    EXPECT_FALSE(w[0].compileOnWorker) << "the client compiles by default";

    const auto onWorker = writeFile("compile.json", R"({"workers": [{"spec": "ssh:box", "compile": "worker"}]})");
    EXPECT_TRUE(parseWorkerSpecs(onWorker.string())[0].compileOnWorker);
    const auto badCompile = writeFile("badcompile.json", R"({"workers": [{"spec": "ssh:box", "compile": "gpu"}]})");
    EXPECT_NE(errorOf(badCompile.string()).find("workers[0].compile: 'gpu' is neither"), std::string::npos)
        << errorOf(badCompile.string());
    fs::remove(onWorker);
    fs::remove(badCompile);

    const auto unknown = writeFile("unknown.json", R"({"workers": [{"spec": "local", "gpus": 2}]})");
    EXPECT_NE(errorOf(unknown.string()).find(unknown.string() + ": workers[0].gpus: unknown field"), std::string::npos)
        << errorOf(unknown.string());
    const auto badSpec = writeFile("badspec.json", R"({"workers": [{"spec": "local"}, {"spec": "ssh:"}]})");
    EXPECT_NE(errorOf(badSpec.string()).find("workers[1].spec: worker spec 'ssh:'"), std::string::npos)
        << errorOf(badSpec.string());
    const auto badType = writeFile("badtype.json", R"({"workers": [{"spec": "ssh:b", "ssh_options": "-i k"}]})");
    EXPECT_NE(
        errorOf(badType.string()).find("workers[0].ssh_options: expected an array of strings"), std::string::npos);
    const auto loginOnSsh = writeFile("login.json", R"({"workers": [{"spec": "ssh:b", "login": "l"}]})");
    EXPECT_NE(
        errorOf(loginOnSsh.string()).find("only a slurm worker is reached through a login node"), std::string::npos);
    const auto notJson = writeFile("notjson.json", "{workers");
    EXPECT_NE(errorOf(notJson.string()).find(": not JSON"), std::string::npos);
    const auto empty = writeFile("empty.json", R"({"workers": []})");
    EXPECT_NE(errorOf(empty.string()).find("no worker listed"), std::string::npos);
    for (const auto& p : { good, unknown, badSpec, badType, loginOnSsh, notJson, empty })
        fs::remove(p);
}

TEST(WorkerSpec, CommandsUseTheUsersSshAndSrun)
{
    const auto local = parseWorkerSpecs("local:2")[0];
    EXPECT_EQ(workerCommand(local, "/b/kloop-worker"), (std::vector<std::string> { "/b/kloop-worker" }));
    const auto env = workerEnvironment(local);
    ASSERT_EQ(env.size(), 1u);
    EXPECT_EQ(env[0], (std::pair<std::string, std::string> { "CUDA_VISIBLE_DEVICES", "2" }));

    const auto ssh = parseWorkerSpecs("ssh:me@box:2222:1")[0];
    const auto argv = workerCommand(ssh, "/b/kloop-worker");
    EXPECT_EQ(argv[0], "ssh");
    EXPECT_TRUE(contains(argv, "BatchMode=yes")) << "never a password prompt";
    EXPECT_FALSE(contains(argv, "StrictHostKeyChecking=no")) << "host keys are checked";
    EXPECT_TRUE(contains(argv, "ControlMaster=auto"));
    EXPECT_TRUE(contains(argv, "ControlPersist=60"));
    EXPECT_TRUE(contains(argv, "2222"));
    EXPECT_TRUE(contains(argv, "me@box"));
    EXPECT_EQ(argv.back(), "env CUDA_VISIBLE_DEVICES=1 kloop-worker");
    EXPECT_TRUE(workerEnvironment(ssh).empty()) << "remote variables travel in the remote command";

    const auto slurm = parseWorkerSpecs("slurm:gpu")[0];
    const auto srun = workerCommand(slurm, "/b/kloop-worker");
    EXPECT_EQ(srun[0], "srun");
    EXPECT_TRUE(contains(srun, "--partition=gpu"));
    EXPECT_TRUE(contains(srun, "--gres=gpu:1"));
    EXPECT_EQ(srun.back(), "kloop-worker");

    WorkerSpec viaLogin = slurm;
    viaLogin.login = "login1";
    viaLogin.worker = "/opt/kl dir/kloop-worker";
    const auto hop = workerCommand(viaLogin, "/b/kloop-worker");
    EXPECT_EQ(hop[0], "ssh");
    EXPECT_TRUE(contains(hop, "login1"));
    EXPECT_EQ(hop.back().rfind("srun --partition=gpu --gres=gpu:1", 0), 0u) << hop.back();
    EXPECT_NE(hop.back().find("'/opt/kl dir/kloop-worker'"), std::string::npos) << "quoted once for the remote shell";

    EXPECT_NE(workerInstallHint(ssh).find("ssh me@box"), std::string::npos);
    EXPECT_NE(workerInstallHint(ssh).find("kloop-worker"), std::string::npos);
}
