#pragma once
// Translates KernelLoop expressions (core/expr.h) into C expressions for generated host code, with the
// same semantics: evaluation in double, C integer division and remainder when both operands are integers,
// and the same functions. The helpers the translation calls (klx_div, ...) are emitted by
// expressionRuntimeC() into every bundle.
#include <functional>
#include <string>
#include <vector>

namespace kl::exporter {

// Returns the C code for an identifier (a dim variable or a baked constant); throws InputError for names
// that have no meaning in the context.
using IdentifierMap = std::function<std::string(const std::string& name)>;

// C expression of type double. Throws InputError naming `what` when the text does not parse.
std::string toCExpression(const std::string& text, const IdentifierMap& ids, const std::string& what);

// Identifiers the expression reads (variables, not functions).
std::vector<std::string> expressionIdentifiers(const std::string& text);

// When the expression is NAME, c*NAME or NAME*c with an integer constant c > 0: NAME and c. Used to infer
// dims from tensor sizes.
struct LinearDim {
    std::string name;
    long long factor = 0;
};
bool asLinearDim(const std::string& text, LinearDim* out);

// static inline C helpers the translated expressions call; plain C99 + math.h.
std::string expressionRuntimeC();

} // namespace kl::exporter
