// kloop prompt: prints the exact prompt the LLM agent would send, for review.
#include "agent/llm/llm_agent.h"
#include "agent/prompt/context_loader.h"
#include "agent/prompt/prompt_builder.h"
#include "cli/command.h"
#include "core/catalogue.h"
#include "core/errors.h"
#include "core/json_io.h"
#include "core/session_store.h"

#include <filesystem>
#include <iostream>
#include <sstream>

namespace fs = std::filesystem;

namespace kl::cli {
namespace {

    std::vector<fs::path> splitDirs(const std::string& s)
    {
        std::vector<fs::path> out;
        std::stringstream ss(s);
        std::string item;
        while (std::getline(ss, item, ':'))
            if (!item.empty())
                out.emplace_back(item);
        return out;
    }

    int runPrompt(const Args& a)
    {
        const auto sessionDir = a.option("session");
        const auto problemArg = a.option("problem");
        if (!a.positionals().empty() || (!problemArg && !sessionDir)) {
            std::cerr
                << "usage: kloop prompt --problem NAME|DIR [--hypothesis TEXT] [--arch sm_90] [--session DIR]\n"
                   "                    [--context DIR[:DIR...]] [--no-user-context] [--bottleneck TEXT] [--json]\n";
            return kExitUsage;
        }
        std::optional<Session> session;
        if (sessionDir)
            session = SessionStore::load(*sessionDir);

        const fs::path folder
            = session ? findSessionProblemFolder(*session, problemArg, *sessionDir) : findProblemFolder(*problemArg);
        Problem problem = loadProblem(folder.string());
        const std::string languageText = a.optionOr("language",
            session && session->settings.extra.count("language") ? session->settings.extra.at("language") : "cuda");
        const auto language = languageFromName(languageText);
        if (!language)
            throw InputError("--language must be cuda or triton, got '" + languageText + "'");
        useTemplateFor(problem, *language);

        DeviceInfo device;
        if (session && !session->device.empty())
            device = session->device;
        if (const auto arch = a.option("arch")) {
            if (!prompt::archNumber(*arch))
                throw InputError("--arch: '" + *arch + "' is not an architecture like sm_90, sm_90a or sm_120");
            if (device.empty() || prompt::archNumber(device) != *prompt::archNumber(*arch)) {
                device = DeviceInfo {};
                device.arch = *arch;
            }
        }
        if (prompt::archNumber(device) == 0) {
            // The H200 the project measures on; say so rather than leave the device facts empty.
            device.arch = "sm_90";
            std::cerr << "kloop prompt: no --arch and no session device; assuming sm_90\n";
        }

        std::vector<fs::path> extra;
        if (const auto c = a.option("context"))
            extra = splitDirs(*c);
        std::vector<fs::path> roots;
        if (a.has("no-user-context")) {
            roots.push_back(dataRoot() / "context");
            roots.insert(roots.end(), extra.begin(), extra.end());
        } else {
            roots = prompt::contextRoots(extra);
        }
        prompt::PromptInputs in = promptInputsFor(problem, device, roots, *language);

        AgentContext ctx;
        ctx.problem = &problem;
        if (session) {
            ctx.session = &*session;
            ctx.branchFrom = session->tree.head();
            const Hypothesis* latest = nullptr;
            for (const auto& [id, h] : session->hypotheses)
                if (!latest || h.createdMs >= latest->createdMs)
                    latest = &h;
            if (latest)
                ctx.hypothesis = *latest;
        }
        if (const auto h = a.option("hypothesis")) {
            Hypothesis hyp;
            hyp.text = *h;
            hyp.author = Author::Human;
            ctx.hypothesis = hyp;
        }
        ctx.bottleneckSummary = a.optionOr("bottleneck", "");
        prompt::fillFromSession(in, ctx);
        if (session)
            in.failures = prompt::failuresFromSession(*session, std::size_t(in.maxFailures));
        const prompt::Prompt p = prompt::buildPrompt(in);

        if (a.has("json")) {
            Json sections = Json::array();
            for (const auto& s : p.sections)
                sections.push_back({ { "title", s.title }, { "message", s.system ? "system" : "user" } });
            Json files = Json::array();
            for (const auto& d : in.context)
                files.push_back({ { "path", d.sourcePath }, { "section", prompt::contextSectionName(d.section) },
                    { "title", d.title } });
            Json j = { { "problem", problem.name }, { "arch", prompt::archNumber(device) }, { "device", device.name },
                { "context_files", files }, { "sections", sections }, { "system", p.system() }, { "user", p.user() },
                { "chars", p.system().size() + p.user().size() } };
            std::cout << j.dump(2) << "\n";
        } else {
            std::cout << p.render();
        }
        return kExitOk;
    }

    const CommandRegistration reg { { "prompt", "print the exact prompt the LLM agent would send",
        "kloop prompt --problem NAME|DIR [--hypothesis TEXT] [--arch sm_90] [--session DIR] [--language cuda|triton]\n"
        "             [--context DIR[:DIR...]] [--no-user-context] [--bottleneck TEXT] [--json]\n\n"
        "Builds the prompt from the problem, the context/ notes that apply to the architecture\n"
        "and the problem's tags (shipped, ~/.config/kernelloop/context, $KL_CONTEXT_DIRS and\n"
        "--context), and, with --session, the session's device, current candidate with its\n"
        "measurements, failed attempts and latest hypothesis. Without a device the architecture\n"
        "comes from --arch (default sm_90). Held-out shapes and seeds are never included.",
        { "json", "no-user-context" },
        { "problem", "session", "arch", "context", "hypothesis", "bottleneck", "language" }, &runPrompt } };

} // namespace
} // namespace kl::cli
