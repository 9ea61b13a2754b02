// qmoe._qmoe: nanobind marshalling over the C ABI (include/qmoe/c_api.h). Python (qmoe/__init__.py)
// normalizes every array first (contiguous, exotic dtypes viewed as same-width integers) and passes
// it here as a pair (DLPack-capable array, qmoe dtype code); this file turns the pairs into
// qmoe_tensor_t, releases the GIL around each C call, and raises qmoe's errors as the Python
// classes of qmoe/_errors.py (bad input -> ValueError subclass, unsupported -> NotImplementedError
// subclass, ...). Nothing here computes.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "qmoe/c_api.h"

namespace nb = nanobind;

namespace {

// A failed C call (or a marshalling error) carried to the exception translator.
struct StatusError : std::runtime_error {
  int status;
  StatusError(int s, const std::string& msg) : std::runtime_error(msg), status(s) {}
};

void check(qmoe_status_t s) {
  if (s != QMOE_OK) throw StatusError(s, qmoe_last_error());
}
[[noreturn]] void bad(const std::string& msg) { throw StatusError(QMOE_ERR_BAD_INPUT, msg); }

using InArr = nb::ndarray<nb::ro>;  // any dtype, any device, read-only accepted

size_t dtype_bytes(int code) {
  switch (code) {
    case QMOE_DTYPE_F64: case QMOE_DTYPE_I64: case QMOE_DTYPE_U64: return 8;
    case QMOE_DTYPE_F32: case QMOE_DTYPE_I32: case QMOE_DTYPE_U32: return 4;
    case QMOE_DTYPE_F16: case QMOE_DTYPE_BF16: case QMOE_DTYPE_I16: case QMOE_DTYPE_U16: return 2;
    default: return 1;
  }
}

// Keeps the imported arrays (and so their producers' memory) alive for one call, and converts.
struct Marshal {
  std::vector<InArr> keep;

  // `h` is None (-> absent tensor, data NULL) or a tuple (array, dtype code).
  qmoe_tensor_t tensor(nb::handle h, const char* what) {
    qmoe_tensor_t t;
    std::memset(&t, 0, sizeof(t));
    t.device = QMOE_DEVICE_CPU;
    if (h.is_none()) return t;
    if (!nb::isinstance<nb::tuple>(h) || nb::len(h) != 2) bad(std::string(what) + ": expected (array, dtype code)");
    nb::tuple pair = nb::borrow<nb::tuple>(h);
    InArr a;
    if (!nb::try_cast(pair[0], a))
      bad(std::string(what) + ": not an array that supports DLPack or the buffer protocol");
    int code = nb::cast<int>(pair[1]);
    if (code < 0 || code > QMOE_DTYPE_BOOL) bad(std::string(what) + ": bad dtype code " + std::to_string(code));
    if (a.itemsize() != dtype_bytes(code))
      bad(std::string(what) + ": element size " + std::to_string(a.itemsize()) + " does not match its dtype");
    if (a.ndim() > QMOE_MAX_DIMS) bad(std::string(what) + ": more than 8 dimensions");
    // Dense row-major only (strides in elements); dims of extent <= 1 may carry any stride.
    int64_t expect = 1;
    for (size_t i = a.ndim(); i-- > 0;) {
      if (a.shape(i) > 1 && a.stride(i) != expect)
        bad(std::string(what) + ": must be C-contiguous (call .contiguous() / np.ascontiguousarray first)");
      expect *= static_cast<int64_t>(a.shape(i));
    }
    if (a.device_type() == nb::device::cpu::value) {
      t.device = QMOE_DEVICE_CPU;
    } else if (a.device_type() == nb::device::cuda::value || a.device_type() == nb::device::cuda_managed::value) {
      t.device = QMOE_DEVICE_CUDA;
      t.device_id = a.device_id();
    } else {
      bad(std::string(what) + ": device type " + std::to_string(a.device_type()) + " is neither CPU nor CUDA");
    }
    t.data = const_cast<void*>(a.data());
    t.dtype = code;
    t.ndim = static_cast<int32_t>(a.ndim());
    for (size_t i = 0; i < a.ndim(); ++i) t.shape[i] = static_cast<int64_t>(a.shape(i));
    keep.push_back(std::move(a));
    return t;
  }
};

template <class T>
T get(const nb::dict& d, const char* key, T dflt) {
  return d.contains(key) ? nb::cast<T>(d[key]) : dflt;
}
nb::handle item(const nb::dict& d, const char* key) { return d.contains(key) ? d[key] : nb::none(); }

qmoe_router_config_t router_from(const nb::dict& r) {
  qmoe_router_config_t c;
  qmoe_router_config_init(&c);
  c.kind = get<int>(r, "kind", c.kind);
  c.top_k = get<int>(r, "top_k", c.top_k);
  c.renormalize = get<bool>(r, "renormalize", false);
  c.grouped_sigmoid = get<bool>(r, "grouped_sigmoid", true);
  c.num_groups = get<int>(r, "num_groups", c.num_groups);
  c.topk_group = get<int>(r, "topk_group", c.topk_group);
  c.routed_scaling_factor = get<float>(r, "routed_scaling_factor", 1.0f);
  c.apply_router_weight_on_input = get<bool>(r, "apply_router_weight_on_input", false);
  return c;
}

void proj_from(Marshal& m, nb::handle h, qmoe_proj_tensors_t& p, const std::string& where) {
  if (h.is_none()) return;
  nb::dict d = nb::cast<nb::dict>(h);
  p.weight = m.tensor(item(d, "weight"), (where + ".weight").c_str());
  p.scale = m.tensor(item(d, "scale"), (where + ".scale").c_str());
  p.zero_point = m.tensor(item(d, "zero_point"), (where + ".zero_point").c_str());
  p.g_idx = m.tensor(item(d, "g_idx"), (where + ".g_idx").c_str());
  p.global_scale = m.tensor(item(d, "global_scale"), (where + ".global_scale").c_str());
  p.input_scale = m.tensor(item(d, "input_scale"), (where + ".input_scale").c_str());
  p.bias = m.tensor(item(d, "bias"), (where + ".bias").c_str());
}

void experts_from(Marshal& m, const nb::dict& d, qmoe_expert_weights_t& w, const std::string& where) {
  qmoe_expert_weights_init(&w);
  w.scheme = get<int>(d, "scheme", w.scheme);
  w.act_quant = get<int>(d, "act_quant", w.act_quant);
  w.weight_bits = get<int>(d, "weight_bits", 0);
  w.weight_strategy = get<int>(d, "weight_strategy", w.weight_strategy);
  w.weight_symmetric = get<int>(d, "weight_symmetric", -1);
  w.num_experts = get<int>(d, "num_experts", 0);
  w.hidden = get<int>(d, "hidden", 0);
  w.intermediate = get<int>(d, "intermediate", 0);
  w.group_size = get<int>(d, "group_size", 0);
  w.block_n = get<int>(d, "block_n", 0);
  w.block_k = get<int>(d, "block_k", 0);
  w.act_dtype = get<int>(d, "act_dtype", w.act_dtype);
  proj_from(m, item(d, "w13"), w.w13, where + ".w13");
  proj_from(m, item(d, "w2"), w.w2, where + ".w2");
}

// A layer descriptor from the dict qmoe/__init__.py builds (keys = qmoe_layer_desc_t fields).
struct Desc {
  qmoe_layer_desc_t d;
  qmoe_expert_weights_t shared;
  std::vector<int32_t> expert_map;
};

void desc_from(Marshal& m, const nb::dict& src, Desc& out) {
  qmoe_layer_desc_init(&out.d);
  experts_from(m, src, out.d.experts, "experts");
  out.d.num_experts_global = get<int>(src, "num_experts_global", 0);
  if (src.contains("router")) out.d.router = router_from(nb::cast<nb::dict>(src["router"]));
  out.d.activation = get<int>(src, "activation", QMOE_ACTIVATION_SILU_MUL);
  out.d.backend = get<int>(src, "backend", QMOE_BACKEND_CPU);
  out.d.borrow_weights = get<bool>(src, "borrow", false);
  nb::handle em = item(src, "expert_map");
  if (!em.is_none()) {
    out.expert_map = nb::cast<std::vector<int32_t>>(em);
    out.d.expert_map = out.expert_map.data();
    if (out.d.num_experts_global == 0) out.d.num_experts_global = static_cast<int32_t>(out.expert_map.size());
    if (static_cast<size_t>(out.d.num_experts_global) != out.expert_map.size())
      bad("expert_map has " + std::to_string(out.expert_map.size()) + " entries but the router has " +
          std::to_string(out.d.num_experts_global) + " experts");
  }
  nb::handle sh = item(src, "shared_expert");
  if (!sh.is_none()) {
    experts_from(m, nb::cast<nb::dict>(sh), out.shared, "shared expert");
    out.d.shared_expert = &out.shared;
  }
  out.d.router_bias = m.tensor(item(src, "router_bias"), "router_bias");
}

struct Layer {
  qmoe_layer_t* h = nullptr;
  explicit Layer(qmoe_layer_t* p) : h(p) {}
  Layer(const Layer&) = delete;
  Layer& operator=(const Layer&) = delete;
  ~Layer() { qmoe_layer_free(h); }
  qmoe_layer_t* get() const {
    if (h == nullptr) bad("the layer was closed");
    return h;
  }
};

struct Checkpoint {
  qmoe_checkpoint_t* h = nullptr;
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;
  Checkpoint(const std::string& dir, int tp_rank, int tp_size, int ep_rank, int ep_size,
             const std::vector<int32_t>& only_layers) {
    qmoe_load_options_t o;
    qmoe_load_options_init(&o);
    o.tp_rank = tp_rank;
    o.tp_size = tp_size;
    o.ep_rank = ep_rank;
    o.ep_size = ep_size;
    o.only_layers = only_layers.empty() ? nullptr : only_layers.data();
    o.num_only_layers = static_cast<int32_t>(only_layers.size());
    qmoe_status_t s;
    {
      nb::gil_scoped_release nogil;
      s = qmoe_checkpoint_load(dir.c_str(), &o, &h);
      if (s != QMOE_OK) throw StatusError(s, qmoe_last_error());
    }
  }
  ~Checkpoint() { qmoe_checkpoint_free(h); }
};

// DLPack dtype of a host view of a qmoe dtype: exact where DLPack has the type, otherwise the
// unsigned integer of the same width (Python reinterprets it with ml_dtypes).
nb::dlpack::dtype view_dtype(int code) {
  using nb::dlpack::dtype_code;
  auto mk = [](dtype_code c, int bits) { return nb::dlpack::dtype{static_cast<uint8_t>(c), static_cast<uint8_t>(bits), 1}; };
  switch (code) {
    case QMOE_DTYPE_F64: return mk(dtype_code::Float, 64);
    case QMOE_DTYPE_F32: return mk(dtype_code::Float, 32);
    case QMOE_DTYPE_F16: return mk(dtype_code::Float, 16);
    case QMOE_DTYPE_I8: return mk(dtype_code::Int, 8);
    case QMOE_DTYPE_I16: return mk(dtype_code::Int, 16);
    case QMOE_DTYPE_I32: return mk(dtype_code::Int, 32);
    case QMOE_DTYPE_I64: return mk(dtype_code::Int, 64);
    case QMOE_DTYPE_BOOL: return mk(dtype_code::Bool, 8);
    default: return mk(dtype_code::UInt, static_cast<int>(dtype_bytes(code) * 8));
  }
}

void* stream_ptr(uintptr_t s) { return reinterpret_cast<void*>(s); }

}  // namespace

NB_MODULE(_qmoe, m) {
  m.doc() = "qmoe C ABI bindings (use the qmoe package, not this module)";

  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError& e) {
      nb::object err = nb::module_::import_("qmoe._errors").attr("from_status")(e.status, e.what());
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(err.ptr())), err.ptr());
    }
  });

  m.def("api_version", &qmoe_c_api_version);
  m.def("version", [] { return std::string(qmoe_version()); });

  nb::class_<Layer>(m, "Layer")
      .def("props",
           [](const Layer& l) {
             qmoe_layer_props_t p;
             check(qmoe_layer_get_props(l.get(), &p));
             nb::dict d;
             d["backend"] = p.backend;
             d["num_experts"] = p.num_experts;
             d["num_experts_global"] = p.num_experts_global;
             d["hidden"] = p.hidden;
             d["intermediate"] = p.intermediate;
             d["top_k"] = p.top_k;
             d["act_dtype"] = p.act_dtype;
             d["scheme"] = p.scheme;
             d["scheme_key"] = std::string(p.scheme_key);
             d["method"] = std::string(p.method_name);
             return d;
           })
      .def("forward",
           [](Layer& l, nb::handle x, nb::handle logits, nb::handle y, uintptr_t stream) {
             Marshal mm;
             qmoe_tensor_t xt = mm.tensor(x, "x"), lt = mm.tensor(logits, "router_logits"), yt = mm.tensor(y, "y");
             qmoe_layer_t* h = l.get();
             nb::gil_scoped_release nogil;
             check(qmoe_layer_forward(h, &xt, &lt, &yt, stream_ptr(stream)));
           })
      .def("forward_routed",
           [](Layer& l, nb::handle x, nb::handle w, nb::handle ids, nb::handle y, uintptr_t stream) {
             Marshal mm;
             qmoe_tensor_t xt = mm.tensor(x, "x"), wt = mm.tensor(w, "topk_weights"), it = mm.tensor(ids, "topk_ids"),
                           yt = mm.tensor(y, "y");
             qmoe_layer_t* h = l.get();
             nb::gil_scoped_release nogil;
             check(qmoe_layer_forward_routed(h, &xt, &wt, &it, &yt, stream_ptr(stream)));
           })
      .def("close", [](Layer& l) {
        qmoe_layer_free(l.h);
        l.h = nullptr;
      });

  m.def("layer_create", [](nb::dict src) {
    Marshal mm;
    Desc d;
    desc_from(mm, src, d);
    qmoe_layer_t* h = nullptr;
    {
      nb::gil_scoped_release nogil;
      check(qmoe_layer_create(&d.d, &h));
    }
    return new Layer(h);
  });

  m.def("fused_experts", [](nb::dict src, nb::handle x, nb::handle w, nb::handle ids, nb::handle y, uintptr_t stream) {
    Marshal mm;
    Desc d;
    desc_from(mm, src, d);
    qmoe_tensor_t xt = mm.tensor(x, "hidden_states"), wt = mm.tensor(w, "topk_weights"),
                  it = mm.tensor(ids, "topk_ids"), yt = mm.tensor(y, "out");
    nb::gil_scoped_release nogil;
    check(qmoe_fused_experts(&d.d, &xt, &wt, &it, &yt, stream_ptr(stream)));
  });

  m.def("route", [](nb::handle logits, nb::dict router, nb::handle bias, nb::handle w, nb::handle ids, uintptr_t stream) {
    Marshal mm;
    qmoe_router_config_t c = router_from(router);
    qmoe_tensor_t lt = mm.tensor(logits, "router_logits"), bt = mm.tensor(bias, "bias"),
                  wt = mm.tensor(w, "topk_weights"), it = mm.tensor(ids, "topk_ids");
    nb::gil_scoped_release nogil;
    check(qmoe_route(&lt, &c, bt.data ? &bt : nullptr, &wt, &it, stream_ptr(stream)));
  }, nb::arg("logits"), nb::arg("router"), nb::arg("bias").none(), nb::arg("topk_weights"), nb::arg("topk_ids"),
     nb::arg("stream"));

  m.def("align_sizes", [](int64_t numel, int num_experts, int block_size) {
    int64_t cap = 0, blocks = 0;
    check(qmoe_align_block_size_sizes(numel, num_experts, block_size, &cap, &blocks));
    return nb::make_tuple(cap, blocks);
  });

  m.def("align_block_size", [](nb::handle ids, int num_experts, int block_size, nb::handle expert_map,
                               nb::handle sorted, nb::handle expert_ids, nb::handle ntp, uintptr_t stream) {
    Marshal mm;
    qmoe_tensor_t it = mm.tensor(ids, "topk_ids"), mt = mm.tensor(expert_map, "expert_map"),
                  st = mm.tensor(sorted, "sorted_token_ids"), et = mm.tensor(expert_ids, "expert_ids"),
                  nt = mm.tensor(ntp, "num_tokens_post_padded");
    nb::gil_scoped_release nogil;
    check(qmoe_align_block_size(&it, num_experts, block_size, mt.data ? &mt : nullptr, &st, &et, &nt,
                                stream_ptr(stream)));
  }, nb::arg("topk_ids"), nb::arg("num_experts"), nb::arg("block_size"), nb::arg("expert_map").none(),
     nb::arg("sorted_token_ids"), nb::arg("expert_ids"), nb::arg("num_tokens_post_padded"), nb::arg("stream"));

  nb::class_<Checkpoint>(m, "Checkpoint")
      .def(nb::init<const std::string&, int, int, int, int, const std::vector<int32_t>&>())
      .def("info_json",
           [](const Checkpoint& c) {
             const char* s = nullptr;
             check(qmoe_checkpoint_info_json(c.h, &s));
             return std::string(s);
           })
      .def("num_layers",
           [](const Checkpoint& c) {
             int32_t n = 0;
             check(qmoe_checkpoint_num_layers(c.h, &n));
             return n;
           })
      .def("tensor",
           [](nb::handle self, int index, const std::string& name) {
             const Checkpoint& c = nb::cast<const Checkpoint&>(self);
             qmoe_tensor_t t;
             check(qmoe_checkpoint_tensor(c.h, index, name.c_str(), &t));
             size_t shape[QMOE_MAX_DIMS];
             for (int i = 0; i < t.ndim; ++i) shape[i] = static_cast<size_t>(t.shape[i]);
             // A read-only NumPy view into the mapped checkpoint; `self` keeps the mapping alive.
             nb::ndarray<nb::numpy, nb::ro> view(t.data, static_cast<size_t>(t.ndim), shape, self, nullptr,
                                                 view_dtype(t.dtype));
             return nb::make_tuple(view, t.dtype);
           })
      .def("layer", [](const Checkpoint& c, int index, int backend) {
        qmoe_layer_t* h = nullptr;
        {
          nb::gil_scoped_release nogil;
          check(qmoe_checkpoint_layer_create(c.h, index, static_cast<qmoe_backend_t>(backend), &h));
        }
        return new Layer(h);
      });
}
