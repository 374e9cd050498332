#pragma once
// kloop's command table. Each cmd_*.cpp registers its commands with a static CommandRegistration,
// so adding a command touches no shared file.
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace kl::cli {

// The command line is wrong (unknown option, missing value, bad number): the command prints it and exits 2.
class UsageError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// Parsed arguments: positionals in order, --option value / --option=value, and bare --switches. Only the declared
// names are accepted: anything else is a UsageError naming it, so a typo never runs with a default.
class Args {
public:
    Args(const std::vector<std::string>& argv, const std::vector<std::string>& switches,
        const std::vector<std::string>& options);
    const std::vector<std::string>& positionals() const { return m_positionals; }
    std::optional<std::string> option(const std::string& name) const;
    std::string optionOr(const std::string& name, const std::string& fallback) const;
    // Every value of an option given more than once (--stage a=X --stage b=Y), in order; option() is the last.
    std::vector<std::string> options(const std::string& name) const;
    bool has(const std::string& name) const; // switch or option present
    // A numeric option in [min, max] (finite, nothing after the number), or fallback when absent; UsageError
    // naming the option otherwise.
    long long integer(const std::string& name, long long fallback, long long min, long long max) const;
    double real(const std::string& name, double fallback, double min, double max) const;
    const std::vector<std::string>& rest() const { return m_rest; } // after a bare "--"

private:
    std::vector<std::string> m_positionals;
    std::map<std::string, std::string> m_options;
    std::map<std::string, std::vector<std::string>> m_repeated;
    std::vector<std::string> m_rest;
};

struct Command {
    std::string path; // "session new", "run", "trace analyze"
    std::string synopsis; // one line for --help
    std::string help; // full text for kloop help <command>
    std::vector<std::string> switches; // flags that take no value, e.g. "json", "resume"
    std::vector<std::string> options; // flags that take a value, e.g. "problem", "budget"
    std::function<int(const Args&)> run; // returns the exit code
};

void registerCommand(Command c);
const std::vector<Command>& commands();

struct CommandRegistration {
    explicit CommandRegistration(Command c) { registerCommand(std::move(c)); }
};

// Exit codes shared by all commands.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1; // the work failed (bad input, no GPU, ...)
inline constexpr int kExitUsage = 2; // the command line was wrong

} // namespace kl::cli
