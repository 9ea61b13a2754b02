// PLACEHOLDER owned by the foundation work (issue 2): QuantArgs validation and names.
#include "qmoe/quant.h"
namespace qmoe {
std::string MoeScheme::key() const { return scheme_kind_name(kind); }
const char* scheme_kind_name(SchemeKind) { return "?"; }
}  // namespace qmoe
