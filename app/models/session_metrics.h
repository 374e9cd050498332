#pragma once
// Numbers the views show, derived from a session snapshot. Pure functions so models, charts and tests agree.
#include "core/candidate.h"
#include "core/evaluation.h"
#include "core/problem.h"
#include "core/session.h"

#include <QColor>
#include <QString>
#include <optional>
#include <vector>

namespace kl::app {

// Geometric mean of the candidate's median latency over the timed shapes shown to agents.
std::optional<double> latencyUs(const kl::Evaluation& e);
// Same for the interleaved baseline timings of the same evaluation.
std::optional<double> baselineLatencyUs(const kl::Evaluation& e);
// Worst relative L2 error over every shape and check; nullopt when nothing was verified.
std::optional<double> worstRelL2(const kl::Evaluation& e);
// The objective (speedup over the baseline); nullopt when not timed.
std::optional<double> speedup(const kl::Evaluation& e);

// The accepted candidate with the highest objective.
std::optional<kl::CandidateId> bestCandidate(const kl::Session& s);

// Relative-L2 tolerance of the problem's first output tensor.
std::optional<double> relL2Tolerance(const kl::Problem& p);

// Evaluations in the order they finished (the x axis of the live charts).
std::vector<const kl::Evaluation*> evaluationsInOrder(const kl::Session& s);

QString statusText(kl::CandidateStatus s); // "pending review"
QString stateText(const kl::Candidate& c); // kl::displayState in words: "baseline", "pending review"
QString authorText(const kl::Candidate& c); // "LLM (openai/gpt-x)"
QString formatLatency(double us); // "12.4 µs", "1.31 ms"
QString formatSpeedup(double x); // "1.84×"
QString firstLine(const std::string& text, int maxChars = 80);

} // namespace kl::app
