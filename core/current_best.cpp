#include "core/current_best.h"

namespace kl {

std::optional<CandidateId> bestAcceptedId(const Session& session)
{
    return session.tree.best([&](const Candidate& c) -> std::optional<double> {
        if (c.status != CandidateStatus::Accepted)
            return std::nullopt;
        const auto it = session.evaluations.find(c.id);
        if (it == session.evaluations.end() || it->second.objective <= 0)
            return std::nullopt;
        return it->second.objective;
    });
}

std::optional<CurrentBest> currentBestOf(const Session& session, const std::optional<CandidateId>& bestId)
{
    const std::optional<CandidateId> id = bestId ? bestId : bestAcceptedId(session);
    if (!id || !session.tree.contains(*id))
        return std::nullopt;
    const auto it = session.evaluations.find(*id);
    if (it == session.evaluations.end() || it->second.objective <= 0)
        return std::nullopt;
    CurrentBest best;
    best.objective = it->second.objective;
    best.reviewJumpFactor = session.settings.reviewJumpFactor;
    for (const ShapeResult& s : it->second.shapes)
        if (!s.heldOut && s.speedup > 0)
            best.shapeSpeedups[s.shape.label()] = s.speedup;
    for (const CandidateId& c : session.tree.withStatus({ CandidateStatus::Accepted }))
        best.acceptedSources.insert(session.tree.at(c).source);
    best.acceptedSources.insert(session.tree.at(*id).source);
    return best;
}

std::vector<RegimeWinner> regimeWinners(const Session& session)
{
    std::vector<RegimeWinner> out;
    const Evaluation* latest = nullptr;
    for (const CandidateId& id : session.tree.order())
        if (const auto it = session.evaluations.find(id);
            it != session.evaluations.end() && !it->second.regimes.empty())
            latest = &it->second;
    if (!latest)
        return out;
    for (const RegimeResult& r : latest->regimes)
        out.push_back({ r.name, r.condition, std::nullopt, RegimeResult {} });
    for (const CandidateId& id : session.tree.order()) {
        const auto it = session.evaluations.find(id);
        if (session.tree.at(id).status != CandidateStatus::Accepted || it == session.evaluations.end())
            continue;
        for (const RegimeResult& r : it->second.regimes) {
            if (!r.won || !(r.objective > 0))
                continue;
            for (RegimeWinner& w : out)
                if (w.regime == r.name && (!w.winner || r.objective > w.result.objective)) {
                    w.winner = id;
                    w.result = r;
                }
        }
    }
    return out;
}

} // namespace kl
