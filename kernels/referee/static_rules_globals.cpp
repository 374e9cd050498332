// static.mutable-global: device globals and function-scope statics that keep state between launches, and const
// device globals written through a cast.
#include "kernels/referee/static_rules.h"

#include <algorithm>
#include <functional>

namespace kl::referee {
namespace {

    class GlobalStateRules : CudaRuleGroup {
    public:
        using CudaRuleGroup::CudaRuleGroup;

        void run()
        {
            mutableGlobals();
            constCastGlobals();
        }

    private:
        enum class Scope { Namespace, Class, Function, Initializer };

        // True when const/constexpr applies to the object itself (not only to what a pointer points at).
        static bool objectIsConst(const std::vector<Token>& decl)
        {
            std::size_t lastIndirection = 0;
            bool anyIndirection = false;
            for (std::size_t i = 0; i < decl.size(); ++i) {
                if (isPunct(decl[i], "*") || isPunct(decl[i], "&")) {
                    lastIndirection = i;
                    anyIndirection = true;
                }
            }
            for (std::size_t i = 0; i < decl.size(); ++i) {
                if (isIdent(decl[i], "constexpr"))
                    return true;
                if (isIdent(decl[i], "const") && (!anyIndirection || i > lastIndirection))
                    return true;
            }
            return false;
        }

        void checkNamespaceDeclaration(const std::vector<Token>& stmt)
        {
            bool device = false;
            for (std::size_t i = 0; i < stmt.size(); ++i) {
                const Token& t = stmt[i];
                if (t.kind != TokenKind::Identifier)
                    continue;
                if (t.text == "typedef" || t.text == "using" || t.text == "static_assert" || t.text == "__global__"
                    || t.text == "__constant__" || t.text == "__shared__" || t.text == "operator"
                    || t.text == "namespace")
                    return;
                device = device || t.text == "__device__" || t.text == "__managed__";
                // __device__ is itself a macro for __attribute__((device)) (or __location__(device)).
                if ((t.text == "__attribute__" || t.text == "__location__" || t.text == "__declspec")
                    && i + 1 < stmt.size() && isPunct(stmt[i + 1], "(")) {
                    int depth = 0;
                    for (std::size_t j = i + 1; j < stmt.size(); ++j) {
                        if (isPunct(stmt[j], "("))
                            ++depth;
                        else if (isPunct(stmt[j], ")") && --depth == 0)
                            break;
                        const std::string& a = stmt[j].text;
                        if (a == "device" || a == "__device__" || a == "managed" || a == "__managed__")
                            device = true;
                        if (a == "constant" || a == "__constant__" || a == "shared" || a == "__shared__")
                            return;
                    }
                }
            }
            if (!device)
                return;
            std::vector<Token> decl;
            for (std::size_t i = 0; i < stmt.size(); ++i) {
                const std::size_t skipped = skipAttributeGroup(stmt, i, stmt.size());
                if (skipped != i) {
                    i = skipped;
                    continue;
                }
                const Token& t = stmt[i];
                if (isPunct(t, "("))
                    return; // a function declaration or definition
                if (isPunct(t, "=") || isPunct(t, ";") || isPunct(t, "{") || isPunct(t, "[") || isPunct(t, ","))
                    break;
                decl.push_back(t);
            }
            const Token* name = nullptr;
            for (const Token& t : decl)
                if (t.kind == TokenKind::Identifier)
                    name = &t;
            if (!name)
                return;
            if (objectIsConst(decl)) {
                m_constDeviceGlobals.insert(name->text);
                return;
            }
            add(rule::MutableGlobal,
                "mutable device global '" + name->text
                    + "' keeps state between launches (caching, call counting); make "
                      "it const/__constant__, or declare a workspace with @kl:workspace",
                name->line);
        }

        void checkFunctionStatic(std::size_t i)
        {
            std::vector<Token> decl;
            for (std::size_t j = i + 1; j < m_code.size(); ++j) {
                const Token& t = m_code[j];
                if (isIdent(t, "__shared__") || isIdent(t, "__constant__"))
                    return;
                if (isPunct(t, "=") || isPunct(t, ";") || isPunct(t, "{") || isPunct(t, "[") || isPunct(t, "(")
                    || isPunct(t, ","))
                    break;
                decl.push_back(t);
            }
            if (objectIsConst(decl))
                return;
            std::string name = decl.empty() ? std::string("?") : decl.back().text;
            add(rule::MutableGlobal,
                "function-scope static '" + name
                    + "' lives in global memory and keeps state between launches; use a "
                      "local, __shared__, or a declared workspace",
                m_code[i].line);
        }

        void mutableGlobals()
        {
            std::vector<Scope> scopes;
            std::vector<Token> stmt;
            bool stmtChecked = false;
            const auto atNamespace = [&] {
                return std::all_of(scopes.begin(), scopes.end(), [](Scope s) { return s == Scope::Namespace; });
            };
            const auto inFunction = [&] {
                return std::any_of(scopes.begin(), scopes.end(), [](Scope s) { return s == Scope::Function; });
            };
            for (std::size_t i = 0; i < m_code.size(); ++i) {
                const Token& t = m_code[i];
                if (isIdent(t, "static") && inFunction()) {
                    checkFunctionStatic(i);
                    continue;
                }
                if (!atNamespace()) {
                    if (isPunct(t, "{")) {
                        // Braces inside an initializer stay initializer; any other nested brace is code we do not
                        // scan for declarations (function-scope statics are handled above).
                        scopes.push_back(scopes.back() == Scope::Initializer ? Scope::Initializer : Scope::Function);
                    } else if (isPunct(t, "}")) {
                        const Scope closed = scopes.back();
                        scopes.pop_back();
                        if (atNamespace() && closed == Scope::Function) {
                            stmt.clear();
                            stmtChecked = false;
                        }
                    }
                    continue;
                }
                if (isPunct(t, ";")) {
                    if (!stmtChecked)
                        checkNamespaceDeclaration(stmt);
                    stmt.clear();
                    stmtChecked = false;
                    continue;
                }
                if (isPunct(t, "}")) {
                    if (!scopes.empty())
                        scopes.pop_back();
                    stmt.clear();
                    stmtChecked = false;
                    continue;
                }
                if (isPunct(t, "{")) {
                    scopes.push_back(classifyBrace(stmt));
                    if (scopes.back() == Scope::Initializer) {
                        checkNamespaceDeclaration(stmt);
                        stmtChecked = true;
                    } else if (scopes.back() == Scope::Namespace) {
                        stmt.clear();
                    }
                    continue;
                }
                stmt.push_back(t);
            }
        }

        // A const device global is ordinary writable global memory once the const is cast away.
        void constCastGlobals()
        {
            if (m_constDeviceGlobals.empty())
                return;
            const auto flag = [&](const Token& name) {
                add(rule::MutableGlobal,
                    "casts const away from device global '" + name.text
                        + "': writing it keeps state between launches; use a declared workspace",
                    name.line);
            };
            for (std::size_t i = 0; i < m_code.size(); ++i) {
                const Token& t = m_code[i];
                if (isIdent(t, "const_cast")) {
                    int depth = 0;
                    for (std::size_t j = i + 1; j < m_code.size(); ++j) {
                        if (isPunct(m_code[j], "("))
                            ++depth;
                        else if (isPunct(m_code[j], ")") && --depth <= 0)
                            break;
                        else if (depth > 0 && m_code[j].kind == TokenKind::Identifier
                            && m_constDeviceGlobals.count(m_code[j].text)) {
                            flag(m_code[j]);
                            break;
                        }
                    }
                } else if (t.kind == TokenKind::Identifier && m_constDeviceGlobals.count(t.text) && i >= 2) {
                    // C-style pointer cast: "(unsigned*)kTable" or "(unsigned*)&kValue".
                    std::size_t k = i - 1;
                    if (isPunct(m_code[k], "&") && k >= 2)
                        --k;
                    if (isPunct(m_code[k], ")") && isPunct(m_code[k - 1], "*"))
                        flag(t);
                }
            }
        }

        static Scope classifyBrace(const std::vector<Token>& stmt)
        {
            bool sawParen = false;
            bool sawAssign = false;
            for (const Token& t : stmt) {
                if (isIdent(t, "namespace"))
                    return Scope::Namespace;
                if (isPunct(t, "("))
                    sawParen = true;
                if (isPunct(t, "="))
                    sawAssign = true;
            }
            if (!stmt.empty() && isIdent(stmt.front(), "extern") && stmt.size() == 2
                && stmt[1].kind == TokenKind::String)
                return Scope::Namespace;
            if (sawAssign)
                return Scope::Initializer;
            for (const Token& t : stmt)
                if (!sawParen
                    && (isIdent(t, "struct") || isIdent(t, "class") || isIdent(t, "union") || isIdent(t, "enum")))
                    return Scope::Class;
            if (!sawParen && !stmt.empty() && (stmt.back().kind == TokenKind::Identifier || isPunct(stmt.back(), "]")))
                return Scope::Initializer; // brace initialization: int x{3};
            return Scope::Function;
        }

        std::set<std::string> m_constDeviceGlobals;
    };

} // namespace

void globalStateRules(const CudaSource& source, const Problem& problem, Findings& found)
{
    GlobalStateRules(source, problem, found).run();
}

} // namespace kl::referee
