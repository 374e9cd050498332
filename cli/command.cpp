#include "cli/command.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace kl::cli {

Args::Args(const std::vector<std::string>& argv, const std::vector<std::string>& switches,
    const std::vector<std::string>& options)
{
    const auto declared = [](const std::vector<std::string>& names, const std::string& name) {
        return std::find(names.begin(), names.end(), name) != names.end();
    };
    for (std::size_t i = 0; i < argv.size(); ++i) {
        const std::string& a = argv[i];
        if (a == "--") {
            m_rest.assign(argv.begin() + static_cast<std::ptrdiff_t>(i) + 1, argv.end());
            break;
        }
        if (a.rfind("--", 0) != 0 || a.size() == 2) {
            m_positionals.push_back(a);
            continue;
        }
        const std::string body = a.substr(2);
        const auto eq = body.find('=');
        const std::string name = body.substr(0, eq);
        if (declared(switches, name)) {
            if (eq != std::string::npos)
                throw UsageError("--" + name + " takes no value");
            m_options[name] = "";
        } else if (declared(options, name)) {
            if (eq != std::string::npos) {
                m_options[name] = body.substr(eq + 1);
            } else if (i + 1 < argv.size() && argv[i + 1].rfind("--", 0) != 0) {
                m_options[name] = argv[++i];
            } else {
                throw UsageError("--" + name + " needs a value");
            }
            if (m_options[name].empty())
                throw UsageError("--" + name + " needs a value");
            m_repeated[name].push_back(m_options[name]);
        } else {
            throw UsageError("unknown option --" + name);
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

std::vector<std::string> Args::options(const std::string& name) const
{
    const auto it = m_repeated.find(name);
    return it == m_repeated.end() ? std::vector<std::string> {} : it->second;
}

std::string Args::optionOr(const std::string& name, const std::string& fallback) const
{
    return option(name).value_or(fallback);
}

bool Args::has(const std::string& name) const
{
    return m_options.count(name) != 0;
}

long long Args::integer(const std::string& name, long long fallback, long long min, long long max) const
{
    const auto v = option(name);
    if (!v)
        return fallback;
    std::size_t used = 0;
    long long n = 0;
    try {
        n = std::stoll(*v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != v->size())
        throw UsageError("--" + name + " takes a whole number, got '" + *v + "'");
    if (n < min || n > max)
        throw UsageError(
            "--" + name + " must be in " + std::to_string(min) + ".." + std::to_string(max) + ", got " + *v);
    return n;
}

double Args::real(const std::string& name, double fallback, double min, double max) const
{
    const auto v = option(name);
    if (!v)
        return fallback;
    std::size_t used = 0;
    double x = 0;
    try {
        x = std::stod(*v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    if (used == 0 || used != v->size() || !std::isfinite(x))
        throw UsageError("--" + name + " takes a finite number, got '" + *v + "'");
    if (x < min || x > max) {
        std::ostringstream range;
        range << "--" << name << " must be in " << min << ".." << max << ", got " << *v;
        throw UsageError(range.str());
    }
    return x;
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
