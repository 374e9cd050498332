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
        // Module-scope .global variables, and the globals their initialisers take the address of.
        std::map<std::string, std::set<std::string>> globals;

    private:
        void parse(const std::string& ptx)
        {
            std::string pending;
            int depth = 0, function = -1, functions = 0, file = 0, line = 0;
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
                    if (n > 0 && n < t.size() && t[n] == ':' && (n + 1 >= t.size() || t[n + 1] != ':'))
                        t = trim(std::string_view(t).substr(n + 1));
                    else
                        break;
                }
                if (!t.empty() && t[0] == '@') {
                    std::size_t n = 1;
                    while (n < t.size() && !std::isspace(static_cast<unsigned char>(t[n])))
                        ++n;
                    t = trim(std::string_view(t).substr(n));
                }
                if (!t.empty())
                    statements.push_back({ t, function, file, line });
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
                                function = functions++;
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
            if (!names.empty())
                definedFunctions.insert(names.back());
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
        return nullptr;
    }

    class PtxChecker {
    public:
        PtxChecker(const std::string& ptx, const Problem& problem, const std::string& sourceName)
            : m_module(ptx)
            , m_problem(problem)
            , m_sourceName(sourceName)
        {
        }

        std::vector<VerdictReason> run()
        {
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
                for (const auto& id : identifiers(op))
                    if (const char* kind = specialRegisterKind(id))
                        add(rule::PtxSpecialRegister, s,
                            "reads " + id + " (" + kind
                                + "): a kernel that can tell time or launches apart can "
                                  "behave differently while checked and while timed");
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

        PtxModule m_module;
        const Problem& m_problem;
        std::string m_sourceName;
        std::vector<VerdictReason> m_out;
        std::set<std::string> m_seen;
    };

} // namespace

std::vector<VerdictReason> checkPtx(const std::string& ptx, const Problem& problem, const std::string& sourceName)
{
    return PtxChecker(ptx, problem, sourceName).run();
}

} // namespace kl::referee
