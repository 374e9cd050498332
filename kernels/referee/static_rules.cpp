// Static rules over the token stream of a CUDA candidate, in rule groups (static_rules_*.cpp) that append
// reasons; checkSource reads the source once (macros expanded) and runs them all. String literals are read only as
// inline PTX.
#include "kernels/referee/static_rules.h"

#include "core/kernel_spec.h"

#include <algorithm>
#include <map>

namespace kl::referee {

void Findings::add(const char* rule, std::string message, int line)
{
    if (!m_seen.insert({ rule, line }).second)
        return;
    const RuleInfo* info = findRule(rule);
    m_out.push_back({ rule, std::move(message), line, info ? info->blocking : true });
}

std::vector<VerdictReason> Findings::byLine() &&
{
    std::stable_sort(
        m_out.begin(), m_out.end(), [](const VerdictReason& a, const VerdictReason& b) { return a.line < b.line; });
    return std::move(m_out);
}

std::size_t skipAttributeGroup(const std::vector<Token>& toks, std::size_t i, std::size_t end)
{
    static const std::set<std::string, std::less<>> attrs = { "__align__", "__attribute__", "alignas",
        "__launch_bounds__", "__declspec", "__maxnreg__", "__cluster_dims__", "decltype" };
    if (toks[i].kind != TokenKind::Identifier || !attrs.count(toks[i].text) || i + 1 >= end
        || !isPunct(toks[i + 1], "("))
        return i;
    int depth = 0;
    for (std::size_t j = i + 1; j < end; ++j) {
        if (isPunct(toks[j], "("))
            ++depth;
        else if (isPunct(toks[j], ")") && --depth == 0)
            return j;
    }
    return end;
}

namespace {

    // Reads a CUDA source for the rules: directives apart, macros expanded.
    class CudaReader {
    public:
        CudaReader(const std::string& source, Findings& found)
            : m_found(found)
        {
            m_source.all = tokenize(source);
            const std::vector<Token>& all = m_source.all;
            std::vector<Token> raw;
            bool inDirective = false;
            for (std::size_t i = 0; i < all.size(); ++i) {
                const Token& t = all[i];
                if (t.kind == TokenKind::Directive) {
                    inDirective = true;
                    if (t.text == "define")
                        defineMacro(i + 1);
                } else if (t.kind == TokenKind::DirectiveEnd) {
                    inDirective = false;
                } else if (!inDirective) {
                    raw.push_back(t);
                }
            }
            // Structural rules read the code with macros expanded, so "#define DEV __device__" or
            // "#define LIMIT 4096" hide nothing. Token pasting is rejected on its own, so expansion never has
            // to build new identifiers.
            std::vector<std::string> active;
            m_source.code = expand(raw, active);
            if (m_expansionBudget < 0)
                m_found.add(rule::MacroExpansion,
                    "macros expand to more than " + std::to_string(kExpansionTokens)
                        + " tokens (a macro bomb); write the code out",
                    m_bombLine);
        }

        const CudaSource& source() const { return m_source; }

    private:
        struct Macro {
            bool function = false;
            std::vector<std::string> params;
            std::vector<Token> body;
        };

        void defineMacro(std::size_t i)
        {
            if (i >= m_source.all.size() || m_source.all[i].kind != TokenKind::Identifier)
                return;
            Macro m;
            const std::string name = m_source.all[i].text;
            std::size_t j = i + 1;
            if (j < m_source.all.size() && isPunct(m_source.all[j], "(") && !m_source.all[j].spaceBefore) {
                m.function = true;
                for (++j; j < m_source.all.size() && !isPunct(m_source.all[j], ")")
                     && m_source.all[j].kind != TokenKind::DirectiveEnd;
                     ++j)
                    if (m_source.all[j].kind == TokenKind::Identifier || isPunct(m_source.all[j], "..."))
                        m.params.push_back(
                            m_source.all[j].kind == TokenKind::Identifier ? m_source.all[j].text : "__VA_ARGS__");
                ++j;
            }
            for (; j < m_source.all.size() && m_source.all[j].kind != TokenKind::DirectiveEnd; ++j)
                m.body.push_back(m_source.all[j]);
            m_macros[name] = std::move(m);
        }

        std::vector<Token> expand(const std::vector<Token>& in, std::vector<std::string>& active)
        {
            const auto isActive = [&](const std::string& name) {
                return std::find(active.begin(), active.end(), name) != active.end();
            };
            std::vector<Token> out;
            for (std::size_t i = 0; i < in.size(); ++i) {
                const Token& t = in[i];
                const auto it = t.kind == TokenKind::Identifier ? m_macros.find(t.text) : m_macros.end();
                if (it != m_macros.end() && m_expansionBudget >= 0 && !isActive(t.text)) {
                    m_expansionBudget -= static_cast<long>(it->second.body.size()) + 1;
                    if (m_expansionBudget < 0)
                        m_bombLine = t.line;
                }
                if (it == m_macros.end() || isActive(t.text) || active.size() > 16 || m_expansionBudget < 0) {
                    out.push_back(t);
                    continue;
                }
                const Macro& m = it->second;
                std::vector<Token> replaced;
                if (!m.function) {
                    replaced = m.body;
                } else {
                    if (i + 1 >= in.size() || !isPunct(in[i + 1], "(")) {
                        out.push_back(t);
                        continue;
                    }
                    std::vector<std::vector<Token>> args(1);
                    int depth = 0;
                    std::size_t j = i + 1;
                    for (; j < in.size(); ++j) {
                        if (isPunct(in[j], "(") && depth++ == 0)
                            continue;
                        if (isPunct(in[j], ")") && --depth == 0)
                            break;
                        if (isPunct(in[j], ",") && depth == 1 && args.size() < m.params.size())
                            args.emplace_back();
                        else
                            args.back().push_back(in[j]);
                    }
                    for (const Token& b : m.body) {
                        const auto p = std::find(m.params.begin(), m.params.end(), b.text);
                        if (b.kind == TokenKind::Identifier && p != m.params.end()) {
                            const std::size_t k = static_cast<std::size_t>(p - m.params.begin());
                            if (k < args.size())
                                replaced.insert(replaced.end(), args[k].begin(), args[k].end());
                        } else {
                            replaced.push_back(b);
                        }
                    }
                    i = j;
                }
                for (Token& r : replaced)
                    r.line = t.line;
                active.push_back(t.text);
                const std::vector<Token> expanded = expand(replaced, active);
                active.pop_back();
                out.insert(out.end(), expanded.begin(), expanded.end());
            }
            return out;
        }

        // Nested macros can grow exponentially; past this many expanded tokens the source is rejected.
        // Nested macros can grow exponentially; past this many expanded tokens the source is rejected.
        static constexpr long kExpansionTokens = 200'000;
        long m_expansionBudget = kExpansionTokens;
        int m_bombLine = 0;
        std::map<std::string, Macro> m_macros;
        CudaSource m_source;
        Findings& m_found;
    };

    // static.include, static.token-paste
    class IncludeRules : CudaRuleGroup {
    public:
        using CudaRuleGroup::CudaRuleGroup;

        void run()
        {
            includes();
            tokenPaste();
        }

    private:
        void includes()
        {
            for (std::size_t i = 0; i < m_all.size(); ++i) {
                const Token& t = m_all[i];
                if (t.kind != TokenKind::Directive)
                    continue;
                if (t.text == "include" || t.text == "include_next" || t.text == "import") {
                    const bool named = i + 1 < m_all.size() && m_all[i + 1].kind == TokenKind::HeaderName;
                    if (!named) {
                        add(rule::Include,
                            "#" + t.text + " without a literal header name; only CUDA's device headers may be included",
                            t.line);
                    } else if (!includeAllowed(m_all[i + 1].text)) {
                        add(rule::Include,
                            "#include <" + m_all[i + 1].text
                                + "> is not on the allow-list (CUDA fp16/bf16/fp8 headers, cooperative_groups, cub/, "
                                  "cute/, cutlass/, "
                                  "cuda/, "
                                  "mma.h, cuda_pipeline.h); candidates are self-contained device code",
                            t.line);
                    }
                }
            }
        }

        void tokenPaste()
        {
            bool inDirective = false;
            for (const Token& t : m_all) {
                if (t.kind == TokenKind::Directive)
                    inDirective = true;
                else if (t.kind == TokenKind::DirectiveEnd)
                    inDirective = false;
                else if (inDirective && isPunct(t, "##"))
                    add(rule::TokenPaste,
                        "token pasting (##) builds identifiers the referee cannot read; write names out", t.line);
            }
        }
    };

} // namespace

const std::vector<std::string>& includeAllowList()
{
    static const std::vector<std::string> list = {
        "cuda_fp16.h",
        "cuda_bf16.h",
        "cuda_fp8.h",
        "cuda_fp4.h",
        "cuda_fp6.h",
        "cooperative_groups.h",
        "cooperative_groups/",
        "cub/",
        "cuda/",
        // CUTLASS/CuTe (the pinned release on NVRTC's include path, kernels/nvrtc_compiler.h): the token rules judge
        // the candidate's own text and the PTX rules what the headers compile to, so the library is not read here.
        "cute/",
        "cutlass/",
        "mma.h",
        "cuda_pipeline.h",
        "cuda_pipeline_primitives.h",
        "cuda_awbarrier.h",
        "cuda_awbarrier_primitives.h",
        "math_constants.h",
        "vector_types.h",
        "vector_functions.h",
        // Standard headers for types and limits: harmless (device code cannot call the host), and LLMs add them.
        "cstdint",
        "stdint.h",
        "climits",
        "cfloat",
        "limits",
        "type_traits",
    };
    return list;
}

bool includeAllowed(const std::string& header)
{
    if (header.find("..") != std::string::npos || header.empty() || header.front() == '/')
        return false;
    for (const std::string& entry : includeAllowList()) {
        if (entry.back() == '/' ? header.compare(0, entry.size(), entry) == 0 && header.size() > entry.size()
                                : header == entry)
            return true;
    }
    return false;
}

std::vector<VerdictReason> checkSource(const std::string& source, const Problem& problem)
{
    if (detectLanguage(source) == KernelLanguage::Triton)
        return checkTritonSource(source, problem);
    Findings found;
    const CudaReader reader(source, found);
    const CudaSource& code = reader.source();
    IncludeRules(code, problem, found).run();
    identifierRules(code, problem, found);
    globalStateRules(code, problem, found);
    sixteenBitOperatorRules(code, problem, found);
    shapeRules(code, problem, found);
    return std::move(found).byLine();
}

} // namespace kl::referee
