#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>

namespace kl {

// Cooperative cancellation shared between the thread that asks and the thread that works.
class CancelToken {
public:
    CancelToken()
        : m_flag(std::make_shared<std::atomic<bool>>(false))
    {
    }
    void cancel() const { m_flag->store(true, std::memory_order_relaxed); }
    bool cancelled() const { return m_flag->load(std::memory_order_relaxed); }

private:
    std::shared_ptr<std::atomic<bool>> m_flag;
};

// Progress of long work in [0, 1]; may be called from any thread.
using ProgressFn = std::function<void(double fraction, const std::string& what)>;

} // namespace kl
