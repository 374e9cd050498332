#pragma once
// Spins the GUI event loop until pred() holds or timeoutMs passes; returns pred().
#include <QElapsedTimer>
#include <QTest>

namespace kl::test {

template <typename Pred> bool waitUntil(Pred pred, int timeoutMs = 10000)
{
    QElapsedTimer clock;
    clock.start();
    while (!pred() && clock.elapsed() < timeoutMs)
        QTest::qWait(10);
    return pred();
}

} // namespace kl::test
