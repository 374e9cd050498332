#include "agent/tuner/multi_fidelity.h"

#include "core/errors.h"

#include <algorithm>
#include <cmath>

namespace kl::tuner {

std::vector<std::size_t> promotable(const std::vector<std::pair<std::size_t, double>>& rungResults, double eta,
    const std::set<std::size_t>& promoted, bool final)
{
    std::vector<std::pair<double, std::size_t>> ranked;
    for (const auto& [i, c] : rungResults)
        if (std::isfinite(c))
            ranked.emplace_back(c, i);
    std::sort(ranked.begin(), ranked.end());
    const double share = static_cast<double>(rungResults.size()) / eta;
    const auto budget = static_cast<std::size_t>(final ? std::ceil(share - 1e-9) : std::floor(share + 1e-9));
    std::vector<std::size_t> out;
    for (std::size_t k = 0; k < ranked.size() && promoted.size() + out.size() < budget; ++k)
        if (!promoted.count(ranked[k].second))
            out.push_back(ranked[k].second);
    return out;
}

MultiFidelitySearch::MultiFidelitySearch(std::unique_ptr<SearchStrategy> base, HalvingPlan plan)
    : m_base(std::move(base))
    , m_plan(std::move(plan))
    , m_results(m_plan.fullRung() + 1)
    , m_taken(m_plan.fullRung() + 1)
    , m_promoted(m_plan.fullRung() + 1)
    , m_deviceMs(m_plan.fullRung() + 1, { 0.0, 0 })
{
    if (!(m_plan.eta > 1) && m_plan.eta != 0)
        throw InputError(
            "multi-fidelity search: eta must be above 1, or 0 for balanced (got " + std::to_string(m_plan.eta) + ")");
    for (const Fidelity& f : m_plan.screens)
        if (!f.screen())
            throw InputError("multi-fidelity search: every screen rung needs a sample count above 0");
}

void MultiFidelitySearch::promote(std::vector<Trial>& out, std::size_t index, std::size_t fromRung, std::size_t toRung)
{
    m_promoted[fromRung].insert(index);
    m_taken[toRung].insert(index);
    out.push_back({ index, toRung });
}

void MultiFidelitySearch::screen(std::vector<Trial>& out, std::size_t count)
{
    for (std::size_t i : m_base->next(count)) {
        m_taken[0].insert(i);
        out.push_back({ i, 0 });
    }
}

std::vector<Trial> MultiFidelitySearch::next(std::size_t n, std::optional<std::size_t> evaluationsLeft)
{
    std::vector<Trial> out;
    if (evaluationsLeft)
        n = std::min(n, *evaluationsLeft);
    // Slots up to screenSlots may screen or climb to another screen; the budget's last ones are the endgame's.
    std::size_t screenSlots = n;
    if (evaluationsLeft)
        screenSlots = *evaluationsLeft > m_plan.endgame ? *evaluationsLeft - m_plan.endgame : 0;
    for (std::size_t rung = m_plan.fullRung(); rung-- > 0 && out.size() < n;)
        for (std::size_t i : promotableAt(rung)) {
            if (out.size() >= n || (rung + 1 < m_plan.fullRung() && out.size() >= screenSlots))
                break; // full, or a climb the budget leaves no room to finish
            promote(out, i, rung, rung + 1);
        }
    if (out.size() < std::min(n, screenSlots))
        screen(out, std::min(n, screenSlots) - out.size());
    const bool endgame = evaluationsLeft && (out.size() >= screenSlots || m_base->exhausted());
    if (!endgame || out.size() >= n || screensInFlight())
        return out;
    for (std::size_t rung = m_plan.fullRung(); rung-- > 0;)
        for (std::size_t i : bestUnpromoted(rung)) {
            if (out.size() >= n || m_endgamePromotions >= m_plan.endgame)
                return out;
            if (m_taken[m_plan.fullRung()].count(i))
                continue;
            promote(out, i, rung, m_plan.fullRung());
            ++m_endgamePromotions;
        }
    if (out.size() >= screenSlots) // nothing left to promote
        screen(out, n - out.size());
    return out;
}

std::vector<std::size_t> MultiFidelitySearch::bestUnpromoted(std::size_t rung) const
{
    return promotable(m_results[rung], 1, m_promoted[rung], true);
}

bool MultiFidelitySearch::screensInFlight() const
{
    for (std::size_t rung = 0; rung < m_plan.fullRung(); ++rung)
        if (m_taken[rung].size() > m_results[rung].size())
            return true;
    return false;
}

void MultiFidelitySearch::markInFlight(const Trial& t)
{
    if (t.rung > m_plan.fullRung())
        return;
    m_taken[t.rung].insert(t.index);
    if (t.rung == 0) {
        m_base->markVisited(t.index);
        return;
    }
    // Promoted from the highest rung below that took it: the endgame sends a screen straight to the full protocol.
    std::size_t from = t.rung - 1;
    while (from > 0 && !m_taken[from].count(t.index))
        --from;
    m_promoted[from].insert(t.index);
}

double MultiFidelitySearch::etaAt(std::size_t rung) const
{
    if (m_plan.eta > 0)
        return m_plan.eta;
    if (rung + 1 >= m_deviceMs.size() || m_deviceMs[rung].second == 0 || m_deviceMs[rung + 1].second == 0)
        return HalvingPlan::kUnmeasuredEta;
    const double here = m_deviceMs[rung].first / m_deviceMs[rung].second;
    const double up = m_deviceMs[rung + 1].first / m_deviceMs[rung + 1].second;
    return std::clamp(up / here, HalvingPlan::kMinEta, HalvingPlan::kMaxEta);
}

void MultiFidelitySearch::observe(const Trial& t, double cost, double deviceMs)
{
    if (t.rung > m_plan.fullRung())
        return;
    markInFlight(t);
    if (deviceMs > 0 && std::isfinite(deviceMs)) {
        m_deviceMs[t.rung].first += deviceMs;
        ++m_deviceMs[t.rung].second;
    }
    if (std::isnan(cost))
        cost = INFINITY;
    auto& results = m_results[t.rung];
    if (std::any_of(results.begin(), results.end(), [&](const auto& r) { return r.first == t.index; }))
        return; // one result per configuration and rung
    results.emplace_back(t.index, cost);
    if (t.rung == 0)
        m_base->observe(t.index, cost);
    if (t.rung == m_plan.fullRung() && std::isfinite(cost) && (!m_bestFull || cost < m_bestFullCost)) {
        m_bestFull = t.index;
        m_bestFullCost = cost;
    }
}

bool MultiFidelitySearch::exhausted() const
{
    if (!m_base->exhausted())
        return false;
    for (std::size_t rung = 0; rung < m_plan.fullRung(); ++rung)
        if (!promotableAt(rung).empty())
            return false;
    return true;
}

std::vector<std::size_t> MultiFidelitySearch::promotableAt(std::size_t rung) const
{
    // Final: the base strategy has nothing left and no result is outstanding at this rung or below it, so the
    // rung's budget rounds up and a late best is not stranded below the full protocol.
    bool final = m_base->exhausted();
    for (std::size_t r = 0; final && r <= rung; ++r)
        final = m_taken[r].size() == m_results[r].size()
            && (r == rung || promotable(m_results[r], etaAt(r), m_promoted[r], true).empty());
    return promotable(m_results[rung], etaAt(rung), m_promoted[rung], final);
}

} // namespace kl::tuner
