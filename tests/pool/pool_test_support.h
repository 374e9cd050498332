#pragma once
// What the pool's tests share: the problem they tune, candidates with the test double's markers, and waiting for
// the double to say it is in the middle of a time op (KL_FAKE_WORKER_BUSY_FILE).
#include "core/candidate.h"
#include "core/json_io.h"
#include "core/problem.h"
#include "core/session_store.h"
#include "loopback_engines.h"
#include "tests/support/text_file.h"

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>

namespace kl::test {

inline Problem poolProblem()
{
    return loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/rmsnorm");
}

// The problem's template with a marker line: a distinct source (and measurement) per tag.
inline Candidate markedCandidate(const Problem& p, const std::string& id, const std::string& marker)
{
    Candidate c;
    c.id = id;
    c.source = "// " + marker + "\n// " + id + "\n" + readFile(std::filesystem::path(p.folder) / p.templateFile);
    return c;
}

inline std::filesystem::path busyFile(const std::string& tag)
{
    return std::filesystem::temp_directory_path() / ("kl-pool-busy-" + std::to_string(::getpid()) + "-" + tag);
}

// The pid of the worker that began a slow time op, once it did (0 after timeoutSeconds).
inline long waitForBusyWorker(const std::filesystem::path& file, double timeoutSeconds = 60)
{
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(long(timeoutSeconds * 1000));
    while (std::chrono::steady_clock::now() < until) {
        if (std::filesystem::exists(file)) {
            const long pid = std::atol(kl::test::readTextFile(file).c_str());
            if (pid > 0)
                return pid;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return 0;
}

} // namespace kl::test
