#pragma once
// Where a pool's workers are, in one grammar (kloop run --workers, the workbench's start page, workers.json):
//   local              the kloop-worker next to kloop, on the GPUs this machine shows it
//   local:GPU          the same, pinned to one GPU (CUDA_VISIBLE_DEVICES=GPU)
//   ssh:[USER@]HOST[:GPU] or ssh:[USER@]HOST:PORT:GPU
//                      "ssh HOST kloop-worker" with the user's ssh config, keys and agent; BatchMode (never a
//                      prompt), host keys checked as the user's config says, a shared ControlMaster connection
//   slurm:PARTITION[:COUNT]
//                      COUNT workers, each "srun --partition=PARTITION --gres=gpu:1 kloop-worker" (a job step
//                      inside an allocation, else its own allocation)
//   FILE.json          {"workers": [{"spec": "...", ...}]}, each entry a spec plus the options below (and
//                      "compile": "worker" to compile CUDA candidates on the worker's host instead of the client)
// Items are separated by commas. Bad input is an InputError naming the spec, or the file and the field.
// KernelLoop stores no secret: authentication is ssh's and Slurm's (munge) business.
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kl {

struct WorkerSpec {
    enum class Kind { Local, Ssh, Slurm };
    Kind kind = Kind::Local;
    std::string id; // unique in a pool: "local", "local:1", "ssh:box", "ssh:box:1", "slurm:gpu#2"
    std::optional<int> gpu; // CUDA_VISIBLE_DEVICES on the worker's host
    std::string host; // ssh: [user@]host
    int port = 0; // ssh: 0 = the ssh config's
    std::string partition; // slurm
    std::string login; // slurm: reach srun through ssh to this login node ("" = srun here)
    std::string worker; // the worker program there ("" = kloop-worker on PATH; local: the one next to kloop)
    std::vector<std::string> sshOptions; // extra ssh arguments ("-i", "KEY", "-o", "UserKnownHostsFile=...")
    std::vector<std::string> srunOptions; // extra srun arguments ("--time=8:00:00", "--account=lab")
    std::map<std::string, std::string> environment; // for the worker process
    bool controlMaster = true; // ssh: share one connection per host (ControlMaster=auto, ControlPersist)
    bool compileOnWorker = false; // workers.json "compile": "worker": its host's NVRTC compiles, not the client's
    double heartbeatSeconds = 10;
    bool remote() const { return kind != Kind::Local; }
};

// "local,ssh:box:0,slurm:gpu:2" or a workers.json path (an item ending in .json); duplicate ids are refused.
std::vector<WorkerSpec> parseWorkerSpecs(const std::string& text);
std::vector<WorkerSpec> loadWorkersFile(const std::filesystem::path& file);

// The command that starts the worker and carries its protocol on stdin/stdout. localWorker: the local program.
std::vector<std::string> workerCommand(const WorkerSpec& spec, const std::string& localWorker);
// Variables for the started process (local: CUDA_VISIBLE_DEVICES and the spec's environment; remote: none, they
// travel in the remote command).
std::vector<std::pair<std::string, std::string>> workerEnvironment(const WorkerSpec& spec);
// What to run where the worker is to get one of this kloop's protocol version.
std::string workerInstallHint(const WorkerSpec& spec);
// Where ssh keeps its shared connections: ~/.cache/kernelloop/ssh (created by the pool).
std::filesystem::path sshControlDir();

} // namespace kl
