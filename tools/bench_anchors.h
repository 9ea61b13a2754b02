// Peer figures of ../shared/docs/anchors.md (measured 2026-11-30), embedded for `qmoe bench`.
//  * kGpuAnchors: one H200, vLLM Triton fused MoE, whole layer, µs; floors computed there with
//    4.60 TB/s and 672 / 1290 TFLOP/s (bf16 / fp8). int4 = W4A16 g128 sym through moe_wna16.
//  * kGgmlAnchors: ggml MUL_MAT_ID on the 2-core Zen 5 development machine, one projection, µs,
//    M = 1, 8, 32, 128, 512 (-1 = not measured); a whole layer costs 2 x up + down.
#pragma once

namespace qmoe::cli {

struct GpuAnchor {
  const char* shape;
  int m;
  double bf16_floor, bf16_vllm, fp8_floor, fp8_vllm, int4_floor, int4_vllm;
};

inline constexpr GpuAnchor kGpuAnchors[] = {
    {"llama4-scout", 1, 54.7, 111, 27.4, 58.8, 14.1, 304},
    {"llama4-scout", 16, 588, 702, 294, 340, 152, 2570},
    {"llama4-scout", 64, 862, 1471, 431, 466, 222, 2303},
    {"llama4-scout", 256, 876, 1569, 439, 510, 227, 2315},
    {"llama4-scout", 1024, 880, 2045, 443, 621, 383, 3289},
    {"llama4-scout", 4096, 1533, 4505, 799, 1324, 1533, 9540},
    {"mixtral-8x7b", 1, 153, 183, 76.7, 114, 39.5, 1092},
    {"mixtral-8x7b", 16, 613, 645, 307, 342, 158, 2870},
    {"mixtral-8x7b", 64, 613, 656, 307, 354, 158, 1577},
    {"mixtral-8x7b", 256, 614, 723, 308, 409, 268, 2420},
    {"mixtral-8x7b", 1024, 1073, 1502, 559, 871, 1073, 6944},
    {"mixtral-8x7b", 4096, 4293, 5034, 2237, 2932, 4293, 24478},
    {"qwen3-30b-a3b", 1, 16.4, 34.4, 8.2, 30.6, 4.2, 85.3},
    {"qwen3-30b-a3b", 16, 167, 198, 83.6, 116, 43.0, 668},
    {"qwen3-30b-a3b", 64, 257, 299, 129, 168, 66.4, 672},
    {"qwen3-30b-a3b", 256, 263, 331, 132, 188, 68.2, 703},
    {"qwen3-30b-a3b", 1024, 264, 392, 134, 249, 115, 1006},
    {"qwen3-30b-a3b", 4096, 460, 744, 240, 568, 460, 2960},
    {"deepseek-v3", 1, 153, 199, 76.7, 103, 39.5, 626},
    {"deepseek-v3", 16, 1991, 2082, 997, 1023, 514, 7407},
    {"deepseek-v3", 64, 4232, 4374, 2118, 2154, 1091, 10403},
    {"deepseek-v3", 256, 4889, 5200, 2448, 2600, 1262, 12006},
    {"deepseek-v3", 1024, 4908, 8807, 2460, 2791, 1270, 12168},
    {"deepseek-v3", 4096, 4927, 15286, 2479, 4549, 4293, 29054},
    {"gpt-oss-120b", 1, 43.3, 70.8, 21.7, 47.6, 11.2, 288},
    {"gpt-oss-120b", 16, 546, 616, 274, 321, 141, 2464},
    {"gpt-oss-120b", 64, 1177, 1294, 589, 656, 304, 3122},
    {"gpt-oss-120b", 256, 1385, 2333, 694, 867, 358, 3657},
    {"gpt-oss-120b", 1024, 1387, 2697, 696, 956, 360, 3694},
    {"gpt-oss-120b", 4096, 1395, 4055, 704, 1495, 1213, 8652},
};

struct GgmlAnchor {
  const char* shape;
  const char* op;    // "up" or "down"
  const char* type;  // ggml type: q4_0, q4_K, q8_0, mxfp4, bf16
  double bits;       // bits per weight
  double us[5];      // M = 1, 8, 32, 128, 512; -1 = not measured
};

inline constexpr int kGgmlM[5] = {1, 8, 32, 128, 512};

inline constexpr GgmlAnchor kGgmlAnchors[] = {
    {"qwen3-30b-a3b", "up", "q4_0", 4.5, {206, 1626, 6120, 23523, 91292}},
    {"qwen3-30b-a3b", "up", "q4_K", 4.5, {203, 1542, 6062, 25022, 80296}},
    {"qwen3-30b-a3b", "up", "q8_0", 8.5, {310, 2914, 11107, 35390, 125306}},
    {"qwen3-30b-a3b", "up", "mxfp4", 4.25, {229, 1790, 7553, 27658, 107952}},
    {"qwen3-30b-a3b", "up", "bf16", 16, {474, 3841, 18063, 26105, 91639}},
    {"qwen3-30b-a3b", "down", "q4_0", 4.5, {226, 1731, 5998, 23213, 91076}},
    {"qwen3-30b-a3b", "down", "q4_K", 4.5, {188, 1366, 5318, 20080, 77350}},
    {"qwen3-30b-a3b", "down", "q8_0", 8.5, {421, 4072, 15167, 40203, 132003}},
    {"qwen3-30b-a3b", "down", "mxfp4", 4.25, {217, 1663, 6670, 24883, 99479}},
    {"qwen3-30b-a3b", "down", "bf16", 16, {559, 5153, 13146, 23204, 79217}},
    {"mixtral-8x7b", "up", "q4_0", 4.5, {1941, 13148, 65473, 242888, 872178}},
    {"mixtral-8x7b", "up", "q4_K", 4.5, {1520, 15541, 61383, 569968, 947778}},
    {"mixtral-8x7b", "up", "q8_0", 8.5, {2985, 24078, 74348, 298252, 1277061}},
    {"mixtral-8x7b", "up", "mxfp4", 4.25, {2385, 20267, 82160, 242483, 1033731}},
    {"mixtral-8x7b", "up", "bf16", 16, {5268, 29620, 72510, 216138, 812846}},
    {"mixtral-8x7b", "down", "q4_0", 4.5, {1863, 13880, 55719, -1, -1}},
    {"mixtral-8x7b", "down", "q4_K", 4.5, {1774, 12460, 50629, -1, -1}},
    {"mixtral-8x7b", "down", "q8_0", 8.5, {3204, 28046, 91020, -1, -1}},
    {"mixtral-8x7b", "down", "mxfp4", 4.25, {2378, 15289, 62352, -1, -1}},
    {"mixtral-8x7b", "down", "bf16", 16, {5203, 40048, 80609, -1, -1}},
    {"llama4-scout", "up", "q4_0", 4.5, {605, 5071, 19385, -1, -1}},
    {"llama4-scout", "up", "q4_K", 4.5, {510, 4563, 16912, -1, -1}},
    {"llama4-scout", "up", "q8_0", 8.5, {940, 8288, 31848, -1, -1}},
    {"llama4-scout", "up", "mxfp4", 4.25, {730, 5331, 25756, -1, -1}},
    {"llama4-scout", "up", "bf16", 16, {1461, 11554, 31804, -1, -1}},
    {"llama4-scout", "down", "q4_0", 4.5, {606, 5086, 19234, -1, -1}},
    {"llama4-scout", "down", "q4_K", 4.5, {539, 4559, 17635, -1, -1}},
    {"llama4-scout", "down", "q8_0", 8.5, {993, 9098, 33751, -1, -1}},
    {"llama4-scout", "down", "mxfp4", 4.25, {830, 6733, 26634, -1, -1}},
    {"llama4-scout", "down", "bf16", 16, {1866, 13370, 41861, -1, -1}},
};

}  // namespace qmoe::cli
