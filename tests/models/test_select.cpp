// select_method: supported schemes get "<backend>/<key>", unsupported ones a kUnsupported error
// naming the layer, the scheme and what is supported; a missing backend says why.
#include <gtest/gtest.h>

#include "cpu/ref/quantize.h"
#include "dispatch/select.h"

namespace qmoe {
namespace {

TEST(Select, SupportedSchemeGetsAMethod) {
  ref::RandomWeightsSpec r;
  r.scheme.kind = SchemeKind::kWNA16;
  r.num_experts = 3, r.hidden = 64, r.intermediate = 32, r.scheme.group_size = 32;
  ExpertWeights w = ref::make_random_expert_weights(r);
  MoeConfig cfg;
  cfg.num_experts = 3;
  cfg.router.top_k = 2;
  MethodChoice c = select_method(w, Backend::kReference, cfg, "layer 7");
  EXPECT_TRUE(c.ok);
  EXPECT_EQ(c.method, "reference/" + w.scheme.key());
#if !defined(QMOE_HAVE_CUDA)
  MethodChoice g = query_method(w, Backend::kCuda, cfg);
  EXPECT_FALSE(g.ok);
  EXPECT_NE(g.reason.find("no CUDA backend"), std::string::npos) << g.reason;
  try {
    select_method(w, Backend::kCuda, cfg, "layer 7");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    std::string m = e.what();
    EXPECT_NE(m.find("layer 7"), std::string::npos) << m;
    EXPECT_NE(m.find(w.scheme.key()), std::string::npos) << m;
  }
#endif
}

TEST(Select, UnsupportedSchemeNamesLayerSchemeAndWhatIsSupported) {
  ref::SchemeSpec s;
  s.kind = SchemeKind::kFP8W8A8;
  s.fp8_strategy = Strategy::kChannel;
  MoeScheme m = ref::make_scheme(s);
  m.input_activations->strategy = Strategy::kChannel;  // static per-channel activations
  m.input_activations->dynamic = Dynamic::kStatic;
  std::string why = scheme_supported(m);
  EXPECT_NE(why.find("static per-channel"), std::string::npos) << why;
  EXPECT_NE(why.find("supported MoE schemes"), std::string::npos) << why;
  MoeConfig cfg;
  cfg.num_experts = 4;
  try {
    select_method(m, Backend::kReference, cfg, "model.layers.3.mlp");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
    std::string msg = e.what();
    EXPECT_NE(msg.find("model.layers.3.mlp"), std::string::npos) << msg;
    EXPECT_NE(msg.find(m.key()), std::string::npos) << msg;
  }
  ref::SchemeSpec i8;
  i8.kind = SchemeKind::kINT8W8A8;
  MoeScheme k = ref::make_scheme(i8);
  EXPECT_EQ(scheme_supported(k), "");
  k.weights.strategy = Strategy::kGroup, k.weights.group_size = 128;  // INT8 W8A8 runs channel only
  EXPECT_NE(scheme_supported(k).find("per-channel"), std::string::npos);
}

}  // namespace
}  // namespace qmoe
