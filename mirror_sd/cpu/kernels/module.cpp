// The Python module of the AVX2 kernels (mirror_sd/cpu/int8.py builds it).
// torch/types.h and the pybind11 bindings, not all of torch/extension.h: half the compile time
#include <torch/types.h>
#include <torch/csrc/utils/pybind.h>

#include <vector>

torch::Tensor row_int8_linear(torch::Tensor x, torch::Tensor w, torch::Tensor wscale,
                              torch::Tensor wsum, torch::Tensor bias);
std::vector<torch::Tensor> quantize_weight(torch::Tensor weight);
torch::Tensor row_int4_linear(torch::Tensor x, torch::Tensor w, torch::Tensor sc, torch::Tensor z,
                              torch::Tensor d, torch::Tensor bias);
std::vector<torch::Tensor> quantize_weight4(torch::Tensor weight);
std::vector<torch::Tensor> layer_pre(torch::Tensor h, torch::Tensor norm_w, double eps,
                                     std::vector<torch::Tensor> qkv, torch::Tensor cos,
                                     torch::Tensor sin, int64_t nq, int64_t nk);
torch::Tensor layer_post(torch::Tensor h, torch::Tensor q, torch::Tensor key, torch::Tensor value,
                         torch::Tensor mask, double scaling, std::vector<torch::Tensor> o_proj,
                         torch::Tensor norm_w, double eps, std::vector<torch::Tensor> gate_up,
                         std::vector<torch::Tensor> down);

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("row_int8_linear", &row_int8_linear, "int8 rows x int8 weights (AVX2)",
        py::call_guard<py::gil_scoped_release>());
  m.def("quantize_weight", &quantize_weight, "per-channel symmetric int8 weights",
        py::call_guard<py::gil_scoped_release>());
  m.def("row_int4_linear", &row_int4_linear, "int8 rows x 4-bit group weights (AVX2)",
        py::call_guard<py::gil_scoped_release>());
  m.def("quantize_weight4", &quantize_weight4, "4-bit weights in groups of 32",
        py::call_guard<py::gil_scoped_release>());
  m.def("layer_pre", &layer_pre, "decoder layer: norm, q/k/v, rotary",
        py::call_guard<py::gil_scoped_release>());
  m.def("layer_post", &layer_post, "decoder layer: attention, o_proj, norm, MLP",
        py::call_guard<py::gil_scoped_release>());
}
