// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * tpu_user._tpu_torch: the one function torch.distributed's plug-in
 * registration needs (tpu_user/torch.py registers it as backend "tpu"),
 * and which path a group's collectives take.
 */
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include "tpu_pg.hpp"

namespace py = pybind11;

PYBIND11_MODULE(_tpu_torch, m) {
  m.doc() = "torch.distributed backend 'tpu' over libtpu_user";
  // Forming the group waits for the other ranks: without the GIL.
  m.def("create_process_group", &tpu_torch::create, py::arg("store"), py::arg("rank"),
        py::arg("size"), py::arg("timeout"), py::call_guard<py::gil_scoped_release>());
  m.def(
      "coll_path",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg) -> std::string {
        auto* tpu = dynamic_cast<tpu_torch::ProcessGroupTPU*>(pg.get());
        TORCH_CHECK(tpu, "tpu: coll_path: not a group of the tpu backend");
        return tpu->collPath();
      },
      py::arg("group"));
}
