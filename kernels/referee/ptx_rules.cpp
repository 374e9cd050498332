// Rules on the PTX NVRTC produced for a candidate: what the compiled code does, whatever its spelling
// (macros, auto, templates, spliced literals) and whichever header it came from. PTX is read statement by
// statement; `.loc` directives (from -lineinfo) map an instruction back to the candidate's line.
#include "core/demangle.h"
#include "kernels/referee/precision.h"
#include "kernels/referee/referee.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <set>
#include <string_view>

namespace kl::referee {
namespace {

    struct Statement {
        std::string text; // without the label and the predicate
        int function = -1; // index of the enclosing .entry/.func; -1 at module scope
        int file = 0; // from the last .loc
        int line = 0;
        std::vector<std::string> labels; // branch targets naming this statement
        bool guarded = false; // "@%p": runs only where the predicate holds
    };

    struct Instruction {
        std::string opcode; // "st.global.u32"
        std::vector<std::string> mods; // "global", "u32"
        std::string base; // "st"
        std::vector<std::string> operands; // split at top-level commas
    };

    bool identStart(char c)
    {
        return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%';
    }
    bool identChar(char c)
    {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$';
    }

    // Identifiers in an operand: registers (%r1, or names declared inside inline asm) and symbols.
    std::vector<std::string> identifiers(std::string_view s)
    {
        std::vector<std::string> out;
        for (std::size_t i = 0; i < s.size();) {
            const bool afterDot = i > 0 && s[i - 1] == '.';
            if (identStart(s[i]) && !(i > 0 && identChar(s[i - 1])) && !afterDot) {
                std::size_t j = i + 1;
                while (j < s.size() && identChar(s[j]))
                    ++j;
                out.emplace_back(s.substr(i, j - i));
                i = j;
            } else {
                ++i;
            }
        }
        return out;
    }

    std::string trim(std::string_view s)
    {
        std::size_t b = 0, e = s.size();
        while (b < e && std::isspace(static_cast<unsigned char>(s[b])))
            ++b;
        while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1])))
            --e;
        return std::string(s.substr(b, e - b));
    }

    // "_ZN8RowCacheILi65536EE3invE" -> "RowCache<65536>::inv": messages name variables as the source does.
    std::string demangled(const std::string& symbol)
    {
        std::string out = demangle(symbol);
        // NVRTC wraps internal-linkage names in a per-file namespace "_INTERNAL_<hash>_candidate_cu_<hash>".
        if (out.rfind("_INTERNAL_", 0) == 0 && out.find("::") != std::string::npos)
            out = out.substr(out.find("::") + 2);
        return out;
    }

    class PtxModule {
    public:
        explicit PtxModule(const std::string& ptx) { parse(ptx); }

        std::vector<Statement> statements;
        std::map<int, std::string> files; // .file index -> path
        std::set<std::string> externFunctions;
        std::set<std::string> definedFunctions;
        struct Function {
            std::string name;
            bool entry = false;
            std::vector<std::string> params; // the parameter symbols, in order
        };
        std::vector<Function> functions; // indexed by Statement::function
        // Module-scope .global variables, and the globals their initialisers take the address of.
        std::map<std::string, std::set<std::string>> globals;

    private:
        void parse(const std::string& ptx)
        {
            std::string pending;
            std::vector<std::string> labels; // seen, waiting for the statement they name
            int depth = 0, function = -1, functionCount = 0, file = 0, line = 0;
            const auto flush = [&] {
                std::string t = trim(pending);
                pending.clear();
                if (t.empty())
                    return;
                // Labels ("$L__BB0_2:") and guards ("@%p1", "@!%p1") are not part of what the statement does.
                for (;;) {
                    std::size_t n = 0;
                    while (n < t.size() && identChar(t[n]))
                        ++n;
                    if (n > 0 && n < t.size() && t[n] == ':' && (n + 1 >= t.size() || t[n + 1] != ':')) {
                        labels.push_back(t.substr(0, n));
                        t = trim(std::string_view(t).substr(n + 1));
                    } else {
                        break;
                    }
                }
                bool guarded = false;
                if (!t.empty() && t[0] == '@') {
                    std::size_t n = 1;
                    while (n < t.size() && !std::isspace(static_cast<unsigned char>(t[n])))
                        ++n;
                    t = trim(std::string_view(t).substr(n));
                    guarded = true;
                }
                if (!t.empty()) {
                    statements.push_back({ t, function, file, line, std::move(labels), guarded });
                    labels.clear();
                }
            };
            std::size_t pos = 0;
            while (pos <= ptx.size()) {
                std::size_t eol = ptx.find('\n', pos);
                if (eol == std::string::npos)
                    eol = ptx.size();
                std::string_view raw(ptx.data() + pos, eol - pos);
                pos = eol + 1;
                if (const std::size_t c = raw.find("//"); c != std::string_view::npos)
                    raw = raw.substr(0, c);
                const std::string l = trim(raw);
                if (l.rfind(".loc", 0) == 0 || l.rfind(".file", 0) == 0) {
                    const bool isLoc = l[1] == 'l';
                    std::size_t i = isLoc ? 4 : 5;
                    int number = 0;
                    while (i < l.size() && std::isspace(static_cast<unsigned char>(l[i])))
                        ++i;
                    const auto digit = [&](int v) { return v > 100000000 ? v : v * 10 + (l[i] - '0'); };
                    for (; i < l.size() && std::isdigit(static_cast<unsigned char>(l[i])); ++i)
                        number = digit(number);
                    if (isLoc) {
                        int ln = 0;
                        while (i < l.size() && std::isspace(static_cast<unsigned char>(l[i])))
                            ++i;
                        for (; i < l.size() && std::isdigit(static_cast<unsigned char>(l[i])); ++i)
                            ln = digit(ln);
                        file = number;
                        line = ln;
                    } else if (const auto q = l.find('"', i); q != std::string::npos) {
                        files[number] = l.substr(q + 1, l.find('"', q + 1) - q - 1);
                    }
                    continue;
                }
                if (depth == 0
                    && (l.rfind(".version", 0) == 0 || l.rfind(".target", 0) == 0
                        || l.rfind(".address_size", 0) == 0)) {
                    continue;
                }
                for (char ch : l) {
                    if (ch == ';') {
                        if (depth == 0)
                            moduleDeclaration(trim(pending));
                        flush();
                    } else if (ch == '{' || ch == '}') {
                        if (depth == 0 && ch == '{') {
                            const std::string header = trim(pending);
                            if (header.find('=') == std::string::npos) { // not an initialiser list
                                functionHeader(header);
                                function = functionCount++;
                                pending.clear();
                                ++depth;
                                continue;
                            }
                            pending += ch;
                            ++initDepth;
                            continue;
                        }
                        if (depth == 0 && ch == '}' && initDepth > 0) {
                            pending += ch;
                            --initDepth;
                            continue;
                        }
                        flush();
                        depth += ch == '{' ? 1 : -1;
                        if (depth <= 0) {
                            depth = 0;
                            function = -1;
                        }
                    } else {
                        pending += ch;
                    }
                }
                pending += ' ';
            }
        }

        void functionHeader(const std::string& header)
        {
            // ".visible .entry name(" or ".func (.param .b32 r) name(": the name precedes the parameter list.
            std::size_t open = header.find('(');
            const std::size_t funcKw = header.find(".func");
            if (funcKw != std::string::npos) {
                std::size_t after = funcKw + 5;
                while (after < header.size() && std::isspace(static_cast<unsigned char>(header[after])))
                    ++after;
                if (after < header.size() && header[after] == '(')
                    open = header.find('(', header.find(')', after));
            }
            std::string_view before(header.data(), open == std::string::npos ? header.size() : open);
            const auto names = identifiers(before);
            Function f;
            f.entry = header.find(".entry") != std::string::npos;
            if (!names.empty()) {
                definedFunctions.insert(names.back());
                f.name = names.back();
            }
            // ".param .u64 k_param_0, .param .align 64 .b8 k_param_1[128]": each piece names one symbol last.
            if (open != std::string::npos) {
                const std::size_t close = header.rfind(')');
                std::string_view list(header.data() + open + 1,
                    close == std::string::npos || close < open ? header.size() - open - 1 : close - open - 1);
                for (std::size_t b = 0; b <= list.size();) {
                    std::size_t e = list.find(',', b);
                    if (e == std::string_view::npos)
                        e = list.size();
                    std::string_view piece = list.substr(b, e - b);
                    if (const auto br = piece.find('['); br != std::string_view::npos)
                        piece = piece.substr(0, br);
                    const auto ids = identifiers(piece);
                    if (!ids.empty())
                        f.params.push_back(ids.back());
                    b = e + 1;
                }
            }
            functions.push_back(std::move(f));
        }

        void moduleDeclaration(const std::string& decl)
        {
            const bool isExternFunc
                = decl.find(".extern") != std::string::npos && decl.find(".func") != std::string::npos;
            if (isExternFunc) {
                std::string_view before(decl.data(), std::min(decl.size(), decl.find('(')));
                // ".extern .func (.param .b32 r) vprintf(": skip a return list.
                const std::size_t fk = decl.find(".func");
                std::size_t a = fk + 5;
                while (a < decl.size() && std::isspace(static_cast<unsigned char>(decl[a])))
                    ++a;
                if (a < decl.size() && decl[a] == '(') {
                    const std::size_t close = decl.find(')', a);
                    const std::size_t open = decl.find('(', close);
                    before = std::string_view(
                        decl.data() + close + 1, (open == std::string::npos ? decl.size() : open) - close - 1);
                }
                const auto names = identifiers(before);
                if (!names.empty())
                    externFunctions.insert(names.back());
                return;
            }
            if (decl.find(".global") == std::string::npos || decl.find(".func") != std::string::npos)
                return;
            const std::size_t eq = decl.find('=');
            std::string_view head(decl.data(), eq == std::string::npos ? decl.size() : eq);
            if (const auto br = head.find('['); br != std::string_view::npos)
                head = head.substr(0, br);
            const auto names = identifiers(head);
            if (names.empty())
                return;
            std::set<std::string> addressed;
            if (eq != std::string::npos)
                for (const auto& id : identifiers(std::string_view(decl).substr(eq + 1)))
                    if (id != "generic")
                        addressed.insert(id);
            globals[names.back()] = addressed;
        }

        int initDepth = 0;
    };

    Instruction decode(const std::string& text)
    {
        Instruction in;
        std::size_t i = 0;
        while (i < text.size() && !std::isspace(static_cast<unsigned char>(text[i])))
            ++i;
        in.opcode = text.substr(0, i);
        std::size_t start = 0;
        for (std::size_t k = 0; k <= in.opcode.size(); ++k)
            if (k == in.opcode.size() || in.opcode[k] == '.') {
                const std::string part = in.opcode.substr(start, k - start);
                if (start == 0)
                    in.base = part;
                else
                    in.mods.push_back(part);
                start = k + 1;
            }
        int depth = 0;
        std::string cur;
        for (std::size_t k = i; k < text.size(); ++k) {
            const char c = text[k];
            if (c == '(' || c == '[' || c == '{')
                ++depth;
            else if (c == ')' || c == ']' || c == '}')
                --depth;
            if (c == ',' && depth == 0) {
                in.operands.push_back(trim(cur));
                cur.clear();
            } else {
                cur += c;
            }
        }
        if (!trim(cur).empty())
            in.operands.push_back(trim(cur));
        return in;
    }

    bool isMemory(const std::string& operand)
    {
        return !operand.empty() && operand[0] == '[';
    }

    // The PTX type modifiers and the precision family each belongs to.
    PrecisionFamily familyOfType(std::string_view t)
    {
        using F = PrecisionFamily;
        if (t == "f16" || t == "f16x2")
            return F::F16;
        if (t == "bf16" || t == "bf16x2")
            return F::BF16;
        if (t == "tf32")
            return F::TF32;
        if (t.rfind("e4m3", 0) == 0 || t.rfind("e5m2", 0) == 0)
            return F::FP8;
        if (t.rfind("e2m1", 0) == 0 || t.rfind("e3m2", 0) == 0 || t.rfind("e2m3", 0) == 0 || t.rfind("ue8m0", 0) == 0)
            return F::FP4_6;
        if (t == "s8" || t == "u8" || t == "s4" || t == "u4" || t == "b1")
            return F::INT8;
        return F::None;
    }
    bool isFloatType(std::string_view t)
    {
        return t == "f32" || t == "f64" || familyOfType(t) != PrecisionFamily::None || t == "s32";
    }
    bool isSixteenBitFloat(std::string_view t)
    {
        const auto f = familyOfType(t);
        return f == PrecisionFamily::F16 || f == PrecisionFamily::BF16;
    }

    // Registers that reveal time or launch identity. %smid, %warpid, %nsmid are allowed: they say where a
    // block runs, not when or in which launch (persistent kernels use %smid honestly).
    const char* specialRegisterKind(const std::string& reg)
    {
        if (reg == "%globaltimer" || reg == "%globaltimer_lo" || reg == "%globaltimer_hi")
            return "the global nanosecond timer";
        if (reg == "%clock" || reg == "%clock_hi" || reg == "%clock64")
            return "the SM cycle counter";
        if (reg.size() >= 4 && reg.rfind("%pm", 0) == 0 && reg[3] >= '0' && reg[3] <= '7')
            return "a performance-monitor counter";
        if (reg == "%gridid")
            return "the grid's launch sequence number";
        // %envreg0..31 are written by the driver per launch and undocumented: no honest kernel reads them, and
        // whatever they hold may tell one launch from another.
        if (reg.rfind("%envreg", 0) == 0 && reg.size() > 7 && std::all_of(reg.begin() + 7, reg.end(), [](char c) {
                return std::isdigit(static_cast<unsigned char>(c));
            }))
            return "a driver-set environment register";
        if (reg == "%current_graph_exec")
            return "the handle of the CUDA graph running the kernel, 0 outside one";
        return nullptr;
    }

    // The special registers that say where a thread runs and how the launch is shaped, never when or which launch.
    // Every other predefined register is rejected, so one added to PTX after these rules were written is too.
    bool geometryRegister(const std::string& reg)
    {
        static const std::set<std::string> allowed = { "%tid", "%ntid", "%laneid", "%warpid", "%nwarpid", "%ctaid",
            "%nctaid", "%smid", "%nsmid", "%is_explicit_cluster", "%clusterid", "%nclusterid", "%cluster_ctaid",
            "%cluster_nctaid", "%cluster_ctarank", "%cluster_nctarank", "%lanemask_eq", "%lanemask_le", "%lanemask_lt",
            "%lanemask_ge", "%lanemask_gt", "%total_smem_size", "%aggr_smem_size", "%dynamic_smem_size" };
        return allowed.count(reg) || reg.rfind("%reserved_smem_offset_", 0) == 0;
    }

    // NVVM's virtual registers (%r12, %rd3, %f7, %fd1, %p2, %rs4, %h1, %hh2): declared in real output, and no
    // special register has this form, so hand-written PTX without the declarations reads the same.
    bool nvvmRegister(const std::string& reg)
    {
        std::size_t n = 1;
        while (n < reg.size() && std::isalpha(static_cast<unsigned char>(reg[n])))
            ++n;
        static const std::set<std::string> prefixes = { "r", "rd", "rs", "rq", "f", "fd", "p", "h", "hh", "rl" };
        return n < reg.size() && prefixes.count(reg.substr(1, n - 1))
            && std::all_of(reg.begin() + static_cast<std::ptrdiff_t>(n), reg.end(),
                [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
    }

    class PtxChecker {
    public:
        PtxChecker(const std::string& ptx, const Problem& problem, const std::string& sourceName)
            : m_module(ptx)
            , m_problem(problem)
            , m_sourceName(sourceName)
        {
        }

        std::vector<VerdictReason> run(const KernelSpec* plan)
        {
            collectDeclaredRegisters();
            for (const Statement& s : m_module.statements) {
                if (s.function < 0 || s.text[0] == '.')
                    continue;
                const Instruction in = decode(s.text);
                specialRegisters(s, in);
                earlyExit(s, in);
                deviceRuntime(s, in);
                precision(s, in);
            }
            mutableGlobals();
            if (plan)
                programmaticLaunches(*plan);
            std::stable_sort(m_out.begin(), m_out.end(),
                [](const VerdictReason& a, const VerdictReason& b) { return a.line < b.line; });
            return m_out;
        }

    private:
        // "candidate.cu:12" or "cuda_fp16.hpp:830 (a header)"; the reason's line is set only for the candidate.
        std::string where(const Statement& s, int* line) const
        {
            const auto it = m_module.files.find(s.file);
            if (it == m_module.files.end() || s.line == 0)
                return "in the compiled code";
            const std::string& path = it->second;
            const std::string base = path.substr(path.find_last_of('/') + 1);
            if (base == m_sourceName) {
                *line = s.line;
                return "at line " + std::to_string(s.line);
            }
            return "in " + base + ":" + std::to_string(s.line) + " (a header the candidate calls)";
        }

        void add(const char* rule, const Statement& s, const std::string& what)
        {
            int line = 0;
            const std::string message = "compiled PTX " + where(s, &line) + ": " + what;
            if (!m_seen.insert(std::string(rule) + "\n" + what + "\n" + std::to_string(line)).second)
                return;
            if (std::count_if(m_out.begin(), m_out.end(), [&](const VerdictReason& r) { return r.rule == rule; }) >= 4)
                return;
            VerdictReason r;
            r.rule = rule;
            r.message = message;
            r.line = line;
            const RuleInfo* info = findRule(rule);
            r.blocking = info ? info->blocking : true;
            m_out.push_back(std::move(r));
        }

        void specialRegisters(const Statement& s, const Instruction& in)
        {
            for (const auto& op : in.operands)
                for (const auto& id : identifiers(op)) {
                    if (const char* kind = specialRegisterKind(id))
                        add(rule::PtxSpecialRegister, s,
                            "reads " + id + " (" + kind
                                + "): a kernel that can tell time or launches apart can "
                                  "behave differently while checked and while timed");
                    else if (id[0] == '%' && !declaredRegister(id) && !geometryRegister(id) && !nvvmRegister(id))
                        add(rule::PtxSpecialRegister, s,
                            "reads " + id
                                + ", a special register outside the geometry ones a kernel may read (%tid, %ctaid, "
                                  "%smid, %cluster_*, %lanemask_*, the shared-memory sizes): whatever it holds may "
                                  "tell time or launches apart");
                }
        }

        // Registers the PTX declares (".reg .b32 %r<4>;", ".reg .u64 %t;" inside inline asm) are not special.
        void collectDeclaredRegisters()
        {
            for (const Statement& s : m_module.statements) {
                if (s.text.rfind(".reg", 0) != 0)
                    continue;
                std::string names;
                std::size_t i = 4;
                for (;;) { // past the type modifiers (.b32, .v2, .pred)
                    while (i < s.text.size() && std::isspace(static_cast<unsigned char>(s.text[i])))
                        ++i;
                    if (i >= s.text.size() || s.text[i] != '.')
                        break;
                    while (i < s.text.size() && !std::isspace(static_cast<unsigned char>(s.text[i])))
                        ++i;
                }
                for (const auto& piece : identifiers(std::string_view(s.text).substr(std::min(i, s.text.size())))) {
                    const std::size_t at = s.text.find(piece, i);
                    const bool indexed = at != std::string::npos && at + piece.size() < s.text.size()
                        && s.text[at + piece.size()] == '<';
                    (indexed ? m_indexedRegisters : m_declaredRegisters).insert(piece);
                }
            }
        }

        bool declaredRegister(const std::string& id) const
        {
            if (m_declaredRegisters.count(id))
                return true;
            std::size_t n = id.size();
            while (n > 1 && std::isdigit(static_cast<unsigned char>(id[n - 1])))
                --n;
            return n < id.size() && m_indexedRegisters.count(id.substr(0, n));
        }

        void earlyExit(const Statement& s, const Instruction& in)
        {
            if (in.base == "trap" || in.base == "exit" || in.base == "brkpt")
                add(rule::PtxEarlyExit, s,
                    "'" + in.base + "' ends threads or the grid outside the kernel's control flow; use return");
            // A device assert (a call of __assertfail) is allowed: it is the honest debugging idiom, and one
            // that fires traps the grid, which the harness records as worker.crashed (a rejection).
        }

        static std::string callTarget(const Instruction& in)
        {
            for (const auto& op : in.operands)
                if (!op.empty() && op[0] != '(') {
                    const auto ids = identifiers(op);
                    return ids.empty() ? std::string() : ids.front();
                }
            return {};
        }

        void deviceRuntime(const Statement& s, const Instruction& in)
        {
            if (in.base != "call")
                return;
            const std::string target = callTarget(in);
            if (target.empty() || target == "__assertfail" || !m_module.externFunctions.count(target))
                return;
            std::string what = "calls " + target + ", a function outside the module";
            if (target.rfind("cudaLaunch", 0) == 0 || target.rfind("cudaGetParameterBuffer", 0) == 0
                || target.rfind("cudaGraphLaunch", 0) == 0)
                what += " (a device-side launch the harness does not plan)";
            else if (target == "malloc" || target == "free" || target.rfind("__nv_", 0) == 0)
                what += " (the device heap, which outlives a launch)";
            else if (target == "vprintf")
                what += " (device printf, an output channel the harness does not own)";
            else
                what += " (the device runtime)";
            add(rule::PtxDeviceRuntime, s, what);
        }

        void precision(const Statement& s, const Instruction& in)
        {
            using F = PrecisionFamily;
            std::vector<std::string> types;
            for (const auto& m : in.mods)
                if (isFloatType(m) || familyOfType(m) != F::None)
                    types.push_back(m);
            const auto flagFamily = [&](const std::string& type, const std::string& role) {
                const F f = familyOfType(type);
                if (f != F::None && !precisionFamilyAllowed(f, m_problem))
                    add(rule::PtxLowerPrecision, s,
                        "'" + in.opcode + "' " + role + " " + precisionFamilyName(f)
                            + ", a format the problem does not declare (its tensors: " + problemDtypeList(m_problem)
                            + ")");
            };
            const bool halfMath = problemHasTag(m_problem, kAllowHalfMathTag);
            static const std::set<std::string> arithmetic = { "add", "sub", "mul", "fma", "mad", "div", "rcp", "sqrt",
                "rsqrt", "ex2", "lg2", "sin", "cos", "tanh" };
            if (arithmetic.count(in.base)) {
                for (const auto& t : types) {
                    if (isSixteenBitFloat(t) && !halfMath) {
                        add(rule::PtxLowerPrecision, s,
                            "'" + in.opcode
                                + "' computes in 16-bit floating point; the problem's math is fp32 "
                                  "(a problem allows it with the tag allow-half-math)");
                        return;
                    }
                    if (familyOfType(t) == F::FP8 || familyOfType(t) == F::FP4_6) {
                        add(rule::PtxLowerPrecision, s, "'" + in.opcode + "' computes in an 8-bit or smaller format");
                        return;
                    }
                }
                return;
            }
            if (in.base == "cvt" && types.size() >= 2) {
                // Integer narrowing (cvt.s8.s32) is index math, not a lower precision.
                if (familyOfType(types[types.size() - 2]) != F::INT8)
                    flagFamily(types[types.size() - 2], "converts to");
                return;
            }
            if (in.base == "dp4a" || in.base == "dp2a") {
                if (!precisionFamilyAllowed(F::INT8, m_problem))
                    add(rule::PtxLowerPrecision, s,
                        "'" + in.opcode + "' is an 8-bit integer dot product; the problem has no int8 tensor");
                return;
            }
            const bool mma = in.base == "mma" || in.base == "wgmma"
                || (in.base == "wmma" && !in.mods.empty() && in.mods[0] == "mma");
            if (!mma || types.empty())
                return;
            // Types in order: D, A, B, C (mma, wmma with explicit inputs), D, A, B (wgmma), or D, C (wmma on f16).
            const std::string& accumulator = types.front();
            std::vector<std::string> inputs;
            if (types.size() == 2)
                inputs = { "f16" };
            else
                inputs.assign(types.begin() + 1, types.begin() + std::min<std::size_t>(types.size(), 3));
            if ((isSixteenBitFloat(accumulator) || (types.size() == 4 && isSixteenBitFloat(types.back()))) && !halfMath)
                add(rule::PtxLowerPrecision, s,
                    "'" + in.opcode + "' accumulates in 16-bit floating point; the problem's math is fp32");
            for (const auto& t : inputs)
                flagFamily(t, "multiplies");
        }

        // A .global variable is state kept between launches when the compiled code writes it, or lets its
        // address escape to memory or to a function (which could write it). Origins of registers are tracked
        // flow-insensitively per function until nothing changes: conservative, never misses a write through
        // a register.
        void mutableGlobals()
        {
            if (m_module.globals.empty())
                return;
            std::map<std::pair<int, std::string>, std::set<std::string>> origin;
            const auto originsOf = [&](int fn, const std::string& operand) {
                std::set<std::string> out;
                for (const auto& id : identifiers(operand)) {
                    if (m_module.globals.count(id))
                        out.insert(id);
                    else if (const auto it = origin.find({ fn, id }); it != origin.end())
                        out.insert(it->second.begin(), it->second.end());
                }
                return out;
            };
            // Loading from a global whose initialiser holds addresses yields those addresses.
            const auto pointees = [&](const std::set<std::string>& from) {
                std::set<std::string> out;
                for (const auto& g : from)
                    for (const auto& p : m_module.globals.at(g))
                        if (m_module.globals.count(p))
                            out.insert(p);
                return out;
            };
            std::vector<std::pair<const Statement*, Instruction>> code;
            for (const Statement& s : m_module.statements)
                if (s.function >= 0 && s.text[0] != '.')
                    code.push_back({ &s, decode(s.text) });
            // A worklist over def-use edges: a statement is revisited only when a register it reads gained an
            // origin. Origin sets only grow and are bounded by the globals, so this ends, in time linear in
            // statements x globals (a pass-until-stable loop would be quadratic on a long reversed chain).
            std::map<std::pair<int, std::string>, std::vector<std::size_t>> users;
            for (std::size_t i = 0; i < code.size(); ++i)
                for (std::size_t k = 1; k < code[i].second.operands.size(); ++k)
                    for (const auto& id : identifiers(code[i].second.operands[k]))
                        users[{ code[i].first->function, id }].push_back(i);
            std::vector<std::size_t> work(code.size());
            for (std::size_t i = 0; i < code.size(); ++i)
                work[i] = code.size() - 1 - i;
            while (!work.empty()) {
                const std::size_t i = work.back();
                work.pop_back();
                const auto& [s, in] = code[i];
                if (in.operands.empty() || isMemory(in.operands[0]) || in.base == "call" || in.base == "bra"
                    || in.base == "setp")
                    continue;
                std::set<std::string> from;
                if (in.base == "ld" || in.base == "ldu" || in.base == "atom") {
                    for (std::size_t k = 1; k < in.operands.size(); ++k)
                        if (isMemory(in.operands[k]))
                            from = pointees(originsOf(s->function, in.operands[k]));
                } else {
                    for (std::size_t k = 1; k < in.operands.size(); ++k) {
                        const auto o = originsOf(s->function, in.operands[k]);
                        from.insert(o.begin(), o.end());
                    }
                }
                if (from.empty())
                    continue;
                for (const auto& dest : identifiers(in.operands[0])) {
                    auto& set = origin[{ s->function, dest }];
                    const std::size_t before = set.size();
                    set.insert(from.begin(), from.end());
                    if (set.size() != before)
                        if (const auto u = users.find({ s->function, dest }); u != users.end())
                            work.insert(work.end(), u->second.begin(), u->second.end());
                }
            }
            // Initialisers that hold another global's address let it escape into memory the code may load.
            std::set<std::string> reported;
            const auto report = [&](const std::set<std::string>& gs, const Statement& s, const std::string& how) {
                for (const auto& g : gs)
                    if (reported.insert(g).second)
                        add(rule::PtxMutableGlobal, s,
                            how + " the namespace-scope variable " + demangled(g)
                                + " (NVRTC runs with -default-device, so it is device memory that survives the "
                                  "launch): state between launches; use a declared @kl:workspace");
            };
            std::set<std::string> pendingParams;
            for (const auto& [s, in] : code) {
                if (in.operands.empty())
                    continue;
                const bool param = !in.mods.empty() && in.mods[0] == "param";
                if (isMemory(in.operands[0]) && !param)
                    report(originsOf(s->function, in.operands[0]), *s, "writes");
                if (in.base == "atom")
                    for (std::size_t k = 1; k < in.operands.size(); ++k)
                        if (isMemory(in.operands[k]))
                            report(originsOf(s->function, in.operands[k]), *s, "atomically updates");
                if (in.base == "st") {
                    for (std::size_t k = 1; k < in.operands.size(); ++k) {
                        const auto o = originsOf(s->function, in.operands[k]);
                        if (param)
                            pendingParams.insert(o.begin(), o.end());
                        else
                            report(o, *s, "stores the address of");
                    }
                }
                if (in.base == "call") {
                    if (!m_module.externFunctions.count(callTarget(in)))
                        report(pendingParams, *s, "passes to a function the address of");
                    pendingParams.clear();
                }
            }
        }

        // pdl=1 lets a kernel start while the plan's previous kernel still runs; only griddepcontrol.wait orders it
        // after that kernel's writes. Whatever the plan writes (outputs, in-place tensors, workspaces, maps over
        // them) may be touched only on paths through an unpredicated wait (or a call of a function that waits on
        // every path): a kernel that skips it races the kernel it depends on, which is faster and only sometimes
        // wrong, so no check of its outputs can be relied on to see it.
        void programmaticLaunches(const KernelSpec& plan)
        {
            std::set<std::string> written;
            for (const auto& t : m_problem.tensors)
                if (t.role != TensorRole::Input)
                    written.insert(t.name);
            for (const auto& w : plan.workspaces)
                written.insert(w.name);
            for (const auto& m : plan.tensorMaps)
                if (written.count(m.tensor))
                    written.insert(m.name);
            std::set<std::string> judged;
            for (const auto& l : plan.launches) {
                if (!l.programmaticLaunch || !judged.insert(l.kernel).second)
                    continue;
                for (std::size_t f = 0; f < m_module.functions.size(); ++f) {
                    const auto& fn = m_module.functions[f];
                    if (!fn.entry || !kernelNameMatches(l.kernel, fn.name))
                        continue;
                    std::map<std::string, std::string> seeds; // parameter symbol -> argument
                    for (std::size_t i = 0; i < fn.params.size() && i < l.args.size(); ++i)
                        if (written.count(l.args[i]))
                            seeds[fn.params[i]] = l.args[i];
                    if (!seeds.empty())
                        accessesBeforeWait(static_cast<int>(f), l.kernel, seeds);
                }
            }
        }

        std::vector<std::size_t> bodyOf(int function) const
        {
            std::vector<std::size_t> out;
            for (std::size_t i = 0; i < m_module.statements.size(); ++i)
                if (m_module.statements[i].function == function)
                    out.push_back(i);
            return out;
        }

        // Control flow between the statements of one function (positions in its body); a branch to a label that
        // is not found, or an indirect one, may go to any label.
        std::vector<std::vector<std::size_t>> successors(const std::vector<std::size_t>& body) const
        {
            std::map<std::string, std::vector<std::size_t>> at;
            for (std::size_t k = 0; k < body.size(); ++k)
                for (const auto& label : m_module.statements[body[k]].labels)
                    at[label].push_back(k);
            std::vector<std::vector<std::size_t>> out(body.size());
            for (std::size_t k = 0; k < body.size(); ++k) {
                const Statement& s = m_module.statements[body[k]];
                const Instruction in = s.text[0] == '.' ? Instruction {} : decode(s.text);
                const bool next = k + 1 < body.size();
                if (in.base == "bra" || in.base == "brx") {
                    const auto ids = in.operands.empty() ? std::vector<std::string> {} : identifiers(in.operands[0]);
                    const auto target = ids.empty() || in.base == "brx" ? at.end() : at.find(ids.front());
                    if (target != at.end())
                        out[k] = target->second;
                    else
                        for (const auto& [label, positions] : at)
                            out[k].insert(out[k].end(), positions.begin(), positions.end());
                    if (s.guarded && next)
                        out[k].push_back(k + 1);
                } else if (in.base == "ret" || in.base == "exit" || in.base == "trap") {
                    if (s.guarded && next)
                        out[k].push_back(k + 1);
                } else if (next) {
                    out[k].push_back(k + 1);
                }
            }
            return out;
        }

        bool waits(const Statement& s, const Instruction& in, std::set<int>& visiting)
        {
            if (s.guarded)
                return false;
            if (in.base == "griddepcontrol")
                return !in.mods.empty() && in.mods[0] == "wait";
            if (in.base != "call")
                return false;
            const std::string target = callTarget(in);
            for (std::size_t f = 0; f < m_module.functions.size(); ++f)
                if (m_module.functions[f].name == target && !m_module.functions[f].entry)
                    return alwaysWaits(static_cast<int>(f), visiting);
            return false;
        }

        // Every path from the function's start to its end passes a wait.
        bool alwaysWaits(int function, std::set<int>& visiting)
        {
            if (const auto it = m_alwaysWaits.find(function); it != m_alwaysWaits.end())
                return it->second;
            if (!visiting.insert(function).second)
                return false;
            const auto body = bodyOf(function);
            const auto next = successors(body);
            std::vector<bool> seen(body.size());
            std::vector<std::size_t> work;
            if (!body.empty())
                work.push_back(0);
            bool escapes = body.empty();
            while (!work.empty() && !escapes) {
                const std::size_t k = work.back();
                work.pop_back();
                if (seen[k])
                    continue;
                seen[k] = true;
                const Statement& s = m_module.statements[body[k]];
                const Instruction in = s.text[0] == '.' ? Instruction {} : decode(s.text);
                if (waits(s, in, visiting))
                    continue;
                if (in.base == "ret" || next[k].empty())
                    escapes = true;
                for (std::size_t n : next[k])
                    work.push_back(n);
            }
            visiting.erase(function);
            return m_alwaysWaits[function] = !escapes;
        }

        void accessesBeforeWait(
            int function, const std::string& kernel, const std::map<std::string, std::string>& seeds)
        {
            const auto body = bodyOf(function);
            std::vector<Instruction> code(body.size());
            for (std::size_t k = 0; k < body.size(); ++k)
                if (m_module.statements[body[k]].text[0] != '.')
                    code[k] = decode(m_module.statements[body[k]].text);
            // Which arguments each register's value derives from (any instruction propagates; a load from memory
            // the function stored an argument's address to yields that address again).
            std::map<std::string, std::set<std::string>> origin;
            std::set<std::string> escaped;
            const auto originsOf = [&](const std::string& operand) {
                std::set<std::string> out;
                for (const auto& id : identifiers(operand)) {
                    if (const auto sd = seeds.find(id); sd != seeds.end())
                        out.insert(sd->second);
                    else if (const auto it = origin.find(id); it != origin.end())
                        out.insert(it->second.begin(), it->second.end());
                }
                return out;
            };
            const auto isParam = [](const Instruction& in) {
                return std::find(in.mods.begin(), in.mods.end(), "param") != in.mods.end();
            };
            for (bool changed = true; changed;) {
                changed = false;
                for (const auto& in : code) {
                    if (in.operands.empty() || in.base == "call" || in.base == "bra" || in.base == "setp")
                        continue;
                    if (isMemory(in.operands[0])) {
                        if (!isParam(in))
                            for (std::size_t k = 1; k < in.operands.size(); ++k)
                                for (const auto& o : originsOf(in.operands[k]))
                                    changed |= escaped.insert(o).second;
                        continue;
                    }
                    std::set<std::string> from;
                    const bool load = in.base == "ld" || in.base == "ldu" || in.base == "atom";
                    for (std::size_t k = 1; k < in.operands.size(); ++k) {
                        if (load && isMemory(in.operands[k]) && !isParam(in)) {
                            from.insert(escaped.begin(), escaped.end());
                            continue;
                        }
                        const auto o = originsOf(in.operands[k]);
                        from.insert(o.begin(), o.end());
                    }
                    for (const auto& dest : identifiers(in.operands[0])) {
                        auto& set = origin[dest];
                        for (const auto& o : from)
                            changed |= set.insert(o).second;
                    }
                }
            }
            const auto next = successors(body);
            std::vector<bool> seen(body.size());
            std::vector<std::size_t> work;
            if (!body.empty())
                work.push_back(0);
            std::set<int> visiting;
            while (!work.empty()) {
                const std::size_t k = work.back();
                work.pop_back();
                if (seen[k])
                    continue;
                seen[k] = true;
                const Statement& s = m_module.statements[body[k]];
                const Instruction& in = code[k];
                if (waits(s, in, visiting))
                    continue;
                const bool prefetch = in.base == "prefetch" || in.base == "prefetchu"
                    || std::find(in.mods.begin(), in.mods.end(), "prefetch") != in.mods.end();
                std::set<std::string> touched;
                for (std::size_t o = 0; o < in.operands.size() && !prefetch; ++o) {
                    const bool passed = isParam(in) && in.base == "st" && o > 0; // an argument of a call
                    if ((isMemory(in.operands[o]) && !isParam(in)) || passed) {
                        const auto t = originsOf(in.operands[o]);
                        touched.insert(t.begin(), t.end());
                    }
                }
                for (const auto& arg : touched)
                    add(rule::PtxPdlWithoutWait, s,
                        "kernel " + kernel
                            + " is launched with pdl=1, so it may start before the plan's previous "
                              "kernel finished, and '"
                            + in.opcode + "' touches " + arg
                            + " (which the plan writes) on a path that passes no griddepcontrol.wait: a race that "
                              "runs faster and is only sometimes wrong; wait first on every path");
                for (std::size_t n : next[k])
                    work.push_back(n);
            }
        }

        PtxModule m_module;
        std::set<std::string> m_declaredRegisters, m_indexedRegisters;
        std::map<int, bool> m_alwaysWaits;
        const Problem& m_problem;
        std::string m_sourceName;
        std::vector<VerdictReason> m_out;
        std::set<std::string> m_seen;
    };

} // namespace

std::vector<VerdictReason> checkPtx(const std::string& ptx, const Problem& problem, const std::string& sourceName)
{
    return PtxChecker(ptx, problem, sourceName).run(nullptr);
}

std::vector<VerdictReason> checkPtx(
    const std::string& ptx, const Problem& problem, const KernelSpec& plan, const std::string& sourceName)
{
    return PtxChecker(ptx, problem, sourceName).run(&plan);
}

} // namespace kl::referee
