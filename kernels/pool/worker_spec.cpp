#include "kernels/pool/worker_spec.h"

#include "core/errors.h"
#include "core/json_io.h"
#include "kl_build_features.h"

#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>

namespace kl {

namespace {

    std::vector<std::string> split(const std::string& s, char sep)
    {
        std::vector<std::string> out;
        std::string item;
        std::stringstream in(s);
        while (std::getline(in, item, sep))
            out.push_back(item);
        if (!s.empty() && s.back() == sep)
            out.emplace_back();
        return out;
    }

    std::optional<int> number(const std::string& s, int min, int max)
    {
        if (s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos)
            return std::nullopt;
        const int v = std::stoi(s);
        if (v < min || v > max)
            return std::nullopt;
        return v;
    }

    bool validHost(const std::string& h)
    {
        if (h.empty() || h[0] == '-') // never an ssh option in disguise
            return false;
        for (char c : h)
            if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == '@'))
                return false;
        return h.find('@') == h.rfind('@') && h.front() != '@' && h.back() != '@';
    }

    // One spec; slurm:P:N expands to N workers.
    std::vector<WorkerSpec> parseOne(const std::string& text)
    {
        const auto bad = [&](const std::string& why) { return InputError("worker spec '" + text + "': " + why); };
        const std::vector<std::string> parts = split(text, ':');
        const std::string& kind = parts[0];
        WorkerSpec w;
        if (kind == "local") {
            if (parts.size() > 2)
                throw bad("expected local or local:GPU_INDEX");
            if (parts.size() == 2) {
                w.gpu = number(parts[1], 0, 1023);
                if (!w.gpu)
                    throw bad("the GPU index must be an integer 0-1023, not '" + parts[1] + "'");
            }
            w.id = text;
            return { w };
        }
        if (kind == "ssh") {
            w.kind = WorkerSpec::Kind::Ssh;
            if (parts.size() < 2 || parts.size() > 4 || parts[1].empty())
                throw bad("expected ssh:[USER@]HOST[:GPU] or ssh:[USER@]HOST:PORT:GPU");
            if (!validHost(parts[1]))
                throw bad("'" + parts[1] + "' is not a host name (letters, digits, . - _ and one user@)");
            w.host = parts[1];
            if (parts.size() == 4) {
                const auto port = number(parts[2], 1, 65535);
                if (!port)
                    throw bad("the port must be 1-65535, not '" + parts[2] + "'");
                w.port = *port;
            }
            if (parts.size() >= 3) {
                w.gpu = number(parts.back(), 0, 1023);
                if (!w.gpu)
                    throw bad("the GPU index must be an integer 0-1023, not '" + parts.back() + "'");
            }
            w.id = text;
            return { w };
        }
        if (kind == "slurm") {
            w.kind = WorkerSpec::Kind::Slurm;
            if (parts.size() < 2 || parts.size() > 3 || parts[1].empty())
                throw bad("expected slurm:PARTITION[:COUNT]");
            if (!validHost(parts[1]) || parts[1].find('@') != std::string::npos)
                throw bad("'" + parts[1] + "' is not a partition name");
            w.partition = parts[1];
            int count = 1;
            if (parts.size() == 3) {
                const auto n = number(parts[2], 1, 1024);
                if (!n)
                    throw bad("the worker count must be 1-1024, not '" + parts[2] + "'");
                count = *n;
            }
            std::vector<WorkerSpec> out;
            for (int i = 1; i <= count; ++i) {
                WorkerSpec each = w;
                each.id = "slurm:" + w.partition + "#" + std::to_string(i);
                out.push_back(each);
            }
            return out;
        }
        throw bad(
            "unknown kind '" + kind + "' (local, local:GPU, ssh:HOST[:GPU], slurm:PARTITION[:COUNT], or a .json file)");
    }

    std::vector<std::string> stringList(const nlohmann::json& j, const char* key, const std::string& where)
    {
        std::vector<std::string> out;
        if (!j.contains(key))
            return out;
        const auto& a = j.at(key);
        if (!a.is_array())
            throw InputError(where + "." + key + ": expected an array of strings");
        for (std::size_t i = 0; i < a.size(); ++i) {
            if (!a[i].is_string())
                throw InputError(where + "." + key + "[" + std::to_string(i) + "]: expected a string");
            out.push_back(a[i].get<std::string>());
        }
        return out;
    }

    void refuseDuplicates(const std::vector<WorkerSpec>& specs, const std::string& where)
    {
        std::set<std::string> seen;
        for (const auto& s : specs)
            if (!seen.insert(s.id).second)
                throw InputError(where + "worker '" + s.id
                    + "' is given twice: two workers on one GPU would time each other's kernels");
    }

    std::string shellQuote(const std::string& s)
    {
        if (!s.empty()
            && s.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./=:@%+,")
                == std::string::npos)
            return s;
        std::string q = "'";
        for (char c : s)
            q += c == '\'' ? std::string("'\\''") : std::string(1, c);
        return q + "'";
    }

    std::vector<std::string> sshPrefix(const WorkerSpec& s, const std::string& host)
    {
        std::vector<std::string> argv = { "ssh", "-T", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=15" };
        if (s.controlMaster) {
            argv.insert(argv.end(),
                { "-o", "ControlMaster=auto", "-o", "ControlPath=" + (sshControlDir() / "%C").string(), "-o",
                    "ControlPersist=60" });
        }
        if (s.port)
            argv.insert(argv.end(), { "-p", std::to_string(s.port) });
        argv.insert(argv.end(), s.sshOptions.begin(), s.sshOptions.end());
        argv.push_back(host);
        argv.push_back("--");
        return argv;
    }

    std::vector<std::string> remoteWords(const WorkerSpec& s)
    {
        std::vector<std::string> words;
        if (s.gpu || !s.environment.empty()) {
            words.push_back("env");
            if (s.gpu)
                words.push_back("CUDA_VISIBLE_DEVICES=" + std::to_string(*s.gpu));
            for (const auto& [k, v] : s.environment)
                words.push_back(k + "=" + v);
        }
        return words;
    }

    std::vector<std::string> srunWords(const WorkerSpec& s)
    {
        std::vector<std::string> words = { "srun", "--partition=" + s.partition, "--gres=gpu:1", "--nodes=1",
            "--ntasks=1", "--unbuffered", "--quiet", "--job-name=kloop-worker" };
        words.insert(words.end(), s.srunOptions.begin(), s.srunOptions.end());
        return words;
    }

} // namespace

std::vector<WorkerSpec> loadWorkersFile(const std::filesystem::path& file)
{
    const std::string where = file.string();
    std::ifstream in(file);
    if (!in)
        throw InputError(where + ": cannot read the workers file");
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(in);
    } catch (const std::exception& e) {
        throw InputError(where + ": not JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("workers") || !j.at("workers").is_array())
        throw InputError(where + ": expected {\"workers\": [...]}");
    static const std::set<std::string> known = { "spec", "worker", "ssh_options", "srun_options", "login",
        "environment", "control_master", "heartbeat_seconds", "compile" };
    std::vector<WorkerSpec> out;
    const auto& workers = j.at("workers");
    for (std::size_t i = 0; i < workers.size(); ++i) {
        const std::string w = where + ": workers[" + std::to_string(i) + "]";
        const auto& e = workers[i];
        if (!e.is_object())
            throw InputError(w + ": expected an object with a \"spec\"");
        for (auto it = e.begin(); it != e.end(); ++it)
            if (!known.count(it.key()))
                throw InputError(w + "." + it.key()
                    + ": unknown field (spec, worker, ssh_options, srun_options, "
                      "login, environment, control_master, heartbeat_seconds, compile)");
        std::vector<WorkerSpec> specs;
        try {
            const std::string spec = jsonfield::string(e, "spec", w);
            if (spec.size() > 5 && spec.substr(spec.size() - 5) == ".json")
                throw InputError("a workers file cannot name another");
            specs = parseOne(spec);
        } catch (const InputError& err) {
            const std::string msg = err.what();
            throw InputError(msg.rfind(w, 0) == 0 ? msg : w + ".spec: " + msg);
        }
        for (WorkerSpec& s : specs) {
            s.worker = jsonfield::stringOr(e, "worker", "", w);
            s.sshOptions = stringList(e, "ssh_options", w);
            s.srunOptions = stringList(e, "srun_options", w);
            s.login = jsonfield::stringOr(e, "login", "", w);
            if (!s.login.empty() && s.kind != WorkerSpec::Kind::Slurm)
                throw InputError(w + ".login: only a slurm worker is reached through a login node");
            if (!s.login.empty() && !validHost(s.login))
                throw InputError(w + ".login: '" + s.login + "' is not a host name");
            s.controlMaster = jsonfield::booleanOr(e, "control_master", true, w);
            const std::string compile = jsonfield::stringOr(e, "compile", "client", w);
            if (compile != "client" && compile != "worker")
                throw InputError(w + ".compile: '" + compile + "' is neither \"client\" (the default) nor \"worker\"");
            s.compileOnWorker = compile == "worker";
            s.heartbeatSeconds = jsonfield::numberOr(e, "heartbeat_seconds", 10, w);
            if (!(s.heartbeatSeconds >= 0) || s.heartbeatSeconds > 3600)
                throw InputError(w + ".heartbeat_seconds: expected 0-3600 (0: no heartbeat)");
            if (e.contains("environment")) {
                const auto& env = e.at("environment");
                if (!env.is_object())
                    throw InputError(w + ".environment: expected an object of strings");
                for (auto it = env.begin(); it != env.end(); ++it) {
                    if (!it.value().is_string() || it.key().empty()
                        || it.key().find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")
                            != std::string::npos)
                        throw InputError(
                            w + ".environment." + it.key() + ": expected NAME (letters, digits, _) = string");
                    s.environment[it.key()] = it.value().get<std::string>();
                }
            }
            out.push_back(std::move(s));
        }
    }
    if (out.empty())
        throw InputError(where + ": workers: no worker listed");
    refuseDuplicates(out, where + ": ");
    return out;
}

std::vector<WorkerSpec> parseWorkerSpecs(const std::string& text)
{
    std::vector<WorkerSpec> out;
    for (std::string item : split(text, ',')) {
        // "local, ssh:box" as people type it (the start page, a quoted --workers)
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        if (item.empty())
            throw InputError("worker specs '" + text + "': an empty item");
        std::vector<WorkerSpec> more
            = item.size() > 5 && item.substr(item.size() - 5) == ".json" ? loadWorkersFile(item) : parseOne(item);
        out.insert(out.end(), more.begin(), more.end());
    }
    if (out.empty())
        throw InputError("worker specs: none given");
    refuseDuplicates(out, "worker specs '" + text + "': ");
    return out;
}

std::filesystem::path sshControlDir()
{
    const char* home = std::getenv("HOME");
    return std::filesystem::path(home && *home ? home : "/tmp") / ".cache" / "kernelloop" / "ssh";
}

std::vector<std::string> workerCommand(const WorkerSpec& s, const std::string& localWorker)
{
    if (s.kind == WorkerSpec::Kind::Local)
        return { s.worker.empty() ? localWorker : s.worker };
    const std::string program = s.worker.empty() ? std::string("kloop-worker") : s.worker;
    std::vector<std::string> words = remoteWords(s);
    if (s.kind == WorkerSpec::Kind::Slurm) {
        std::vector<std::string> srun = srunWords(s);
        srun.insert(srun.end(), words.begin(), words.end());
        srun.push_back(program);
        if (s.login.empty())
            return srun;
        words = srun;
    } else {
        words.push_back(program);
    }
    // ssh joins its arguments into one command for the remote shell: quote each word once, here.
    std::string remote;
    for (const auto& w : words)
        remote += (remote.empty() ? "" : " ") + shellQuote(w);
    std::vector<std::string> argv = sshPrefix(s, s.kind == WorkerSpec::Kind::Slurm ? s.login : s.host);
    argv.push_back(remote);
    return argv;
}

std::vector<std::pair<std::string, std::string>> workerEnvironment(const WorkerSpec& s)
{
    std::vector<std::pair<std::string, std::string>> env;
    if (s.kind == WorkerSpec::Kind::Slurm && s.login.empty()) {
        for (const auto& [k, v] : s.environment) // srun passes the client's environment on to the step
            env.emplace_back(k, v);
        return env;
    }
    if (s.kind != WorkerSpec::Kind::Local)
        return env;
    if (s.gpu)
        env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(*s.gpu));
    for (const auto& [k, v] : s.environment)
        env.emplace_back(k, v);
    return env;
}

std::string workerInstallHint(const WorkerSpec& s)
{
    const std::string steps = std::string("cd KERNELLOOP_CHECKOUT && git checkout v") + KL_VERSION
        + " && scripts/install-deps --no-gui && scripts/build -DKL_BUILD_GUI=OFF && install -m755 "
          "build/kernels/kloop-worker ~/.local/bin/";
    switch (s.kind) {
    case WorkerSpec::Kind::Local:
        return "rebuild this checkout (scripts/build): kloop and kloop-worker come from one build";
    case WorkerSpec::Kind::Ssh:
        return "ssh " + s.host + " '" + steps + "'";
    case WorkerSpec::Kind::Slurm:
        return (s.login.empty() ? std::string("on the cluster: ") : "ssh " + s.login + " ") + "'" + steps + "'";
    }
    return steps;
}

} // namespace kl
