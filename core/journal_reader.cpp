#include "core/journal_reader.h"

#include "core/errors.h"

#include <fstream>
#include <string>
#include <utility>

namespace fs = std::filesystem;

namespace kl {

namespace {
    constexpr std::uint64_t kMaxJournalBytes = std::uint64_t(2) << 30;
}

JournalReader::JournalReader(fs::path journal)
    : m_path(std::move(journal))
{
}

std::size_t JournalReader::readAppended(const std::function<void(Event)>& onEvent)
{
    std::error_code ec;
    const auto status = fs::symlink_status(m_path, ec);
    if (ec || !fs::exists(status))
        throw InputError("cannot read " + m_path.string() + ": no such file");
    if (!fs::is_regular_file(status))
        throw InputError("cannot read " + m_path.string() + ": not a regular file");
    const std::uint64_t size = fs::file_size(m_path, ec);
    if (ec)
        throw InputError("cannot read " + m_path.string() + ": " + ec.message());
    if (size > kMaxJournalBytes)
        throw InputError(m_path.string() + " is " + std::to_string(size) + " bytes, more than the limit of "
            + std::to_string(kMaxJournalBytes));
    if (size < m_offset)
        throw InputError(m_path.string() + ": shorter than the " + std::to_string(m_offset)
            + " bytes already read (journal replaced or truncated)");
    if (size == m_offset)
        return 0;
    std::ifstream in(m_path, std::ios::binary);
    if (!in)
        throw InputError("cannot open " + m_path.string());
    in.seekg(static_cast<std::streamoff>(m_offset));
    std::string text(size - m_offset, '\0');
    in.read(text.data(), static_cast<std::streamsize>(text.size()));
    text.resize(static_cast<std::size_t>(in.gcount()));

    std::size_t handed = 0;
    std::size_t pos = 0;
    for (std::size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
        const std::string line = text.substr(pos, nl - pos);
        const std::string where = m_path.string() + " line " + std::to_string(m_lines + 1);
        if (!line.empty()) {
            Event e;
            try {
                e = eventFromJson(nlohmann::json::parse(line));
            } catch (const std::exception& err) {
                throw InputError(where + ": " + err.what());
            }
            if (e.seq != m_nextSeq)
                throw InputError(where + ": event sequence " + std::to_string(e.seq) + " where "
                    + std::to_string(m_nextSeq) + " was expected (journal edited or corrupted)");
            try {
                onEvent(std::move(e));
            } catch (const std::exception& err) {
                throw InputError(where + ": " + err.what());
            }
            ++m_nextSeq;
            ++handed;
        }
        ++m_lines;
        m_offset += nl + 1 - pos;
    }
    m_unterminated = text.size() - pos;
    return handed;
}

} // namespace kl
