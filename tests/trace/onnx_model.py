"""onnx_model.py: a small ONNX model for the trace tests (tests/trace/onnx_app.mjs), written with
Debian's python3-onnx: y = x @ W + b, W a 512 x 2048 float initializer (4 MiB of weights, stored
in the file: ONNX Runtime reads them into its own memory when a session is created).

    python3 tests/trace/onnx_model.py OUT.onnx
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main(out):
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((512, 2048)).astype(np.float32), "W")
    b = numpy_helper.from_array(np.zeros(2048, dtype=np.float32), "b")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 512])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2048])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["xw"]),
                               helper.make_node("Add", ["xw", "b"], ["y"])],
                              "wmtrace", [x], [y], [w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    onnx.save(model, out)


if __name__ == "__main__":
    main(sys.argv[1])
