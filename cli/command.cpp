#include "cli/command.h"

#include <algorithm>

namespace kl::cli {

Args::Args(std::vector<std::string> argv, std::vector<std::string> switches)
{
    for (std::size_t i = 0; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        if (a == "--") {
            m_rest.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1, argv.end());
            break;
        }
        if (a.rfind("--", 0) == 0) {
            std::string name = a.substr(2);
            const auto eq = name.find('=');
            if (eq != std::string::npos) {
                m_options[name.substr(0, eq)] = name.substr(eq + 1);
            } else if (std::find(switches.begin(), switches.end(), name) != switches.end() || i + 1 >= argv.size()) {
                m_options[name] = "";
            } else {
                m_options[name] = argv[++i];
            }
        } else {
            m_positionals.push_back(a);
        }
    }
}

std::optional<std::string> Args::option(const std::string& name) const
{
    const auto it = m_options.find(name);
    if (it == m_options.end())
        return std::nullopt;
    return it->second;
}

std::string Args::optionOr(const std::string& name, const std::string& fallback) const
{
    return option(name).value_or(fallback);
}

bool Args::has(const std::string& name) const
{
    return m_options.count(name) != 0;
}

namespace {
    std::vector<Command>& table()
    {
        static std::vector<Command> t;
        return t;
    }
} // namespace

void registerCommand(Command c)
{
    table().push_back(std::move(c));
}

const std::vector<Command>& commands()
{
    auto& t = table();
    std::sort(t.begin(), t.end(), [](const Command& a, const Command& b) { return a.path < b.path; });
    return t;
}

} // namespace kl::cli
