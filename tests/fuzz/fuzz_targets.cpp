#include "tests/fuzz/fuzz_targets.h"

#include "agent/prompt/reply_parser.h"
#include "core/errors.h"
#include "core/expr.h"
#include "core/json_io.h"
#include "core/kernel_spec.h"
#include "profiler/analysis.h"
#include "profiler/chrome_export.h"
#include "profiler/importers.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>

namespace kl::fuzz {

namespace {

    void require(bool ok, const std::string& what)
    {
        if (!ok)
            throw PropertyViolation(what);
    }

    // A refusal must say something and must not echo a hostile input whole.
    void requireMessage(const std::exception& e, std::string_view input)
    {
        const std::string m = e.what();
        require(!m.empty(), "an error without a message");
        require(m.size() <= 2048 + input.size() / 16, "an error message of " + std::to_string(m.size()) + " bytes");
    }

    int height(const Expr::Node* n)
    {
        // Iterative, so that the check itself cannot overflow on the tree it checks.
        int best = 0;
        std::vector<std::pair<const Expr::Node*, int>> stack { { n, 1 } };
        while (!stack.empty()) {
            const auto [node, h] = stack.back();
            stack.pop_back();
            best = std::max(best, h);
            for (const auto& a : node->args)
                stack.push_back({ a.get(), h + 1 });
        }
        return best;
    }

    bool sameValue(double a, double b)
    {
        return a == b || (std::isnan(a) && std::isnan(b));
    }

    void checkExpression(std::string_view input)
    {
        const std::string text(input);
        Expr e;
        try {
            e = Expr::parse(text);
        } catch (const ExprError& err) {
            requireMessage(err, input);
            require(std::string(err.what()).find("expression") != std::string::npos, "a parse error not naming it");
            return;
        }
        require(text.size() <= Expr::kMaxLength, "accepted text above the length limit");
        require(e.text() == text, "text() differs from the parsed text");
        require(e.root() && height(e.root()) <= Expr::kMaxDepth, "a tree deeper than the limit");
        Bindings b;
        for (const auto& id : e.identifiers()) {
            require(Expr::isVariableName(id), "identifier '" + id + "' is not a variable name");
            b[id] = 3;
        }
        double v = 0;
        try {
            v = e.evaluate(b);
        } catch (const ExprError& err) {
            requireMessage(err, input);
            return;
        }
        require(sameValue(Expr::parse(text).evaluate(b), v), "evaluation is not deterministic");
        // Parenthesising changes nothing but one level of depth.
        try {
            const Expr wrapped = Expr::parse("(" + text + ")");
            require(sameValue(wrapped.evaluate(b), v), "(E) evaluates differently from E");
        } catch (const ExprError& err) {
            require(std::string(err.what()).find("levels deep") != std::string::npos
                    || std::string(err.what()).find("limit of") != std::string::npos,
                std::string("(E) refused for another reason than a limit: ") + err.what());
        }
    }

    const Problem& rmsnorm()
    {
        static const Problem p = loadProblem(std::string(KL_SOURCE_DIR) + "/kernels/problems/rmsnorm");
        return p;
    }

    void checkSpec(const KernelSpec& spec, const std::string& source)
    {
        std::set<std::string> names;
        for (const auto& p : spec.params) {
            require(names.insert(p.name).second, "parameter " + p.name + " twice");
            require(!p.values.empty() && p.values.size() <= 4096, "a parameter with no or too many values");
            require(std::find(p.values.begin(), p.values.end(), p.defaultValue) != p.values.end(),
                "a default outside its values");
        }
        require(!spec.launches.empty(), "a spec without a launch");
        // The baked source declares the same annotations: the defines come before them and are not directives.
        const KernelSpec baked = parseKernelSpec(bakeParameters(source, spec.defaults()));
        require(baked.params.size() == spec.params.size() && baked.constraints.size() == spec.constraints.size()
                && baked.launches.size() == spec.launches.size(),
            "baking parameters changed the annotations");
        for (const auto& config : spec.enumerateSpace(64))
            require(spec.satisfies(config, {}), "enumerateSpace gave a configuration its constraints refuse");
    }

    void checkAnnotations(std::string_view input)
    {
        const std::string source(input);
        try {
            const KernelSpec spec = parseKernelSpec(source);
            checkSpec(spec, source);
        } catch (const InputError& err) {
            requireMessage(err, input);
            return;
        }
        try {
            const KernelSpec spec = parseKernelSpec(source, rmsnorm());
            try {
                spec.requireValidParams(spec.defaults());
            } catch (const InputError& err) {
                requireMessage(err, input);
            }
        } catch (const InputError& err) {
            requireMessage(err, input);
            require(std::string(err.what()).rfind("line ", 0) == 0, "a problem-check error not naming the line");
        }
    }

    void checkProblemJson(std::string_view input)
    {
        Json j;
        try {
            j = Json::parse(input);
        } catch (const Json::exception&) {
            return; // loadProblem reports JSON syntax errors itself; the semantic parser is the target here
        }
        Problem p;
        try {
            p = problemFromJson(j, "fuzz/problem.json");
        } catch (const InputError& err) {
            requireMessage(err, input);
            require(std::string(err.what()).rfind("fuzz/problem.json", 0) == 0, "an error not naming the file");
            return;
        }
        const Json out = toJson(p);
        Problem again;
        try {
            again = problemFromJson(out, "again");
        } catch (const InputError& err) {
            throw PropertyViolation(std::string("an accepted problem does not load again: ") + err.what());
        }
        require(toJson(again) == out, "problem.json does not round-trip");
    }

    void checkReply(std::string_view input)
    {
        static const std::string base = [] {
            std::ifstream in(std::string(KL_SOURCE_DIR) + "/kernels/problems/rmsnorm/template.cu");
            std::ostringstream s;
            s << in.rdbuf();
            return s.str();
        }();
        static const std::set<std::string> kinds
            = { "malformed-reply", "diff-does-not-apply", "bad-annotations", "no-change" };
        const std::string reply(input);
        for (const std::string* b : { &base, static_cast<const std::string*>(nullptr) }) {
            try {
                const prompt::ParsedReply r = prompt::parseReply(reply, b);
                require(!r.source.empty(), "a reply parsed to an empty source");
                require(!r.spec.launches.empty(), "a reply accepted without a launch line");
                require(b || r.kind == prompt::ParsedReply::Kind::Candidate, "a diff accepted without a base");
                const KernelSpec again = parseKernelSpec(r.source);
                require(again.params.size() == r.spec.params.size(), "the reply's spec differs from its source's");
            } catch (const prompt::ReplyError& err) {
                requireMessage(err, input);
                require(kinds.count(err.kind()) == 1, "unknown reply error kind '" + err.kind() + "'");
            }
        }
    }

    void checkTrace(std::string_view input)
    {
        prof::Trace t;
        try {
            prof::MemorySource src(input);
            t = prof::importChromeJson(src, "fuzz.json");
        } catch (const InputError& err) {
            requireMessage(err, input);
            return;
        }
        (void)t.drawItems(0, 0, 0, t.endNs(), 1000);
        const prof::Analysis a = prof::analyze(t);
        // Names in a trace need not be UTF-8; what kloop prints replaces such bytes (reported to the profiler).
        (void)prof::toJson(a).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
        (void)prof::toText(a);
        // What kloop writes it reads back.
        const std::string exported = prof::toChromeJson(t);
        prof::MemorySource back(exported);
        try {
            const prof::Trace again = prof::importChromeJson(back, "again.json");
            require(again.eventCount() == t.eventCount(),
                "a re-imported export has " + std::to_string(again.eventCount()) + " events, not "
                    + std::to_string(t.eventCount()));
        } catch (const InputError& err) {
            throw PropertyViolation(std::string("an exported trace does not import: ") + err.what());
        }
    }

} // namespace

const std::vector<Target>& targets()
{
    static const std::vector<Target> all = {
        { "expressions", &checkExpression },
        { "annotations", &checkAnnotations },
        { "problem_json", &checkProblemJson },
        { "llm_replies", &checkReply },
        { "traces", &checkTrace },
    };
    return all;
}

} // namespace kl::fuzz
