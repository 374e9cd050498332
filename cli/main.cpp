// kloop: the command-line face of KernelLoop's engine (the same core the GUI and the tests use).
#include "cli/command.h"
#include "kl_build_features.h"

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

namespace {

void printUsage()
{
    std::cout << "kloop " KL_VERSION " - KernelLoop command line\n\n"
                 "Usage: kloop <command> [options]\n"
                 "       kloop help <command>\n\nCommands:\n";
    for (const auto& c : kl::cli::commands())
        std::printf("  %-22s %s\n", c.path.c_str(), c.synopsis.c_str());
    std::cout << "\nMost commands take --json for machine-readable output.\n";
}

// The commands of a group ("session" -> session new/show/list/diff); false when there is no such group.
bool printGroup(const std::string& group)
{
    bool any = false;
    for (const auto& c : kl::cli::commands())
        if (c.path.rfind(group + " ", 0) == 0) {
            if (!any)
                std::cout << "Usage: kloop " << group << " <command> [options]\n\nCommands:\n";
            any = true;
            std::printf("  %-22s %s\n", c.path.c_str(), c.synopsis.c_str());
        }
    if (any)
        std::cout << "\nkloop help " << group << " <command> prints a command's options.\n";
    return any;
}

const kl::cli::Command* findCommand(const std::vector<std::string>& words, std::size_t& used)
{
    const kl::cli::Command* best = nullptr;
    std::size_t bestLen = 0;
    for (const auto& c : kl::cli::commands()) {
        // Match the longest command path that prefixes the words ("session new" beats "session").
        std::string path;
        for (std::size_t n = 1; n <= words.size(); ++n) {
            path += (n > 1 ? " " : "") + words[n - 1];
            if (path == c.path && n > bestLen) {
                best = &c;
                bestLen = n;
            }
        }
    }
    used = bestLen;
    return best;
}

} // namespace

int main(int argc, char** argv)
{
    std::vector<std::string> words(argv + 1, argv + argc);
    if (words.empty() || words[0] == "--help" || words[0] == "-h") {
        printUsage();
        return words.empty() ? kl::cli::kExitUsage : kl::cli::kExitOk;
    }
    if (words[0] == "--version")
        words = { "version" };
    if (words[0] == "help") {
        std::vector<std::string> rest(words.begin() + 1, words.end());
        std::size_t used = 0;
        if (const auto* c = findCommand(rest, used)) {
            std::cout << "kloop " << c->path << " - " << c->synopsis << "\n\n" << c->help << "\n";
            return kl::cli::kExitOk;
        }
        if (rest.empty()) {
            printUsage();
            return kl::cli::kExitOk;
        }
        if (printGroup(rest[0]))
            return kl::cli::kExitOk;
        std::cerr << "kloop: unknown command '" << rest[0] << "'. Run 'kloop --help'.\n";
        return kl::cli::kExitUsage;
    }
    std::size_t used = 0;
    const auto* cmd = findCommand(words, used);
    if (!cmd) {
        // "kloop session --help", "kloop trace": the group's commands.
        if (printGroup(words[0])) {
            const bool help = words.size() > 1 && (words[1] == "--help" || words[1] == "-h");
            return help ? kl::cli::kExitOk : kl::cli::kExitUsage;
        }
        std::cerr << "kloop: unknown command '" << words[0] << "'. Run 'kloop --help'.\n";
        return kl::cli::kExitUsage;
    }
    std::vector<std::string> rest(words.begin() + static_cast<std::ptrdiff_t>(used), words.end());
    for (const auto& w : rest)
        if (w == "--help" || w == "-h") {
            std::cout << "kloop " << cmd->path << " - " << cmd->synopsis << "\n\n" << cmd->help << "\n";
            return kl::cli::kExitOk;
        }
    try {
        return cmd->run(kl::cli::Args(rest, cmd->switches, cmd->options));
    } catch (const kl::cli::UsageError& e) {
        std::cerr << "kloop " << cmd->path << ": " << e.what() << " (see kloop " << cmd->path << " --help)\n";
        return kl::cli::kExitUsage;
    } catch (const std::exception& e) {
        std::cerr << "kloop " << cmd->path << ": " << e.what() << "\n";
        return kl::cli::kExitFailure;
    }
}
