"""Rewrites the int8 all-MiniLM-L6-v2 ONNX graph so ONNX Runtime never expands weights to float32 whole.

The PyPI model stores every weight as int8 plus a float scale and turns it back into float32 in the graph
(Cast to float, then Mul by the scale) in front of the Gather or MatMul that uses it. ONNX Runtime either
constant-folds those (graph optimisation level 1 and up: ~90 MB of float32 weights resident) or runs them on
every inference (level 0: a 47 MB float32 copy of the token-embedding table each call). This rewrite moves
the dequantisation behind the lookup or product, where it is exact:

  Gather(Cast(Wq) * s_row, ids)  ->  Cast(Gather(Wq, ids)) * Gather(s_row, ids)   (per-row scale)
  MatMul(A, Cast(Wq) * s_col)    ->  MatMul(A, Cast(Wq)) * s_col                   (per-column scale)

so only one layer's float32 weight (at most 2.4 MB) exists at a time. The rewrite finds nothing to move in a
model it already rewrote, so running it again is harmless.

The weights are then saved beside the graph as external data (OUT.onnx.data). ONNX Runtime maps that file
into memory instead of parsing the weights into a heap copy: loading no longer holds the weights twice (peak
after load ~66 -> ~54 MiB), and the weights are clean file pages the kernel can drop and read back.

Run by `scripts/setup memory`:
  python3 gather_first.py IN.onnx OUT.onnx
"""

import os

import sys

import onnx
from onnx import helper, numpy_helper


def main(src, dst):
    model = onnx.load(src)
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    inits = {init.name: init for init in graph.initializer}
    consumers = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)

    def dequant_parts(name):
        """(int8 initializer, scale initializer, cast node, mul node) if `name` is Cast(Wq) * scale."""
        mul = producer.get(name)
        if mul is None or mul.op_type != "Mul" or len(consumers.get(name, [])) != 1:
            return None
        cast = producer.get(mul.input[0])
        scale = mul.input[1]
        if cast is None or cast.op_type != "Cast" or scale not in inits:
            return None
        if cast.input[0] not in inits or len(consumers.get(cast.output[0], [])) != 1:
            return None
        return cast.input[0], scale, cast, mul

    removed, new_nodes, rewrites = set(), {}, 0
    for node in graph.node:
        if node.op_type == "Gather" and not [a for a in node.attribute if a.name == "axis" and a.i != 0]:
            parts = dequant_parts(node.input[0])
            if parts is None:
                continue
            weight, scale, cast, mul = parts
            dims = list(inits[scale].dims)
            if dims[-1] != 1:
                continue
            ids, out = node.input[1], node.output[0]
            new_nodes[id(node)] = [
                helper.make_node("Gather", [weight, ids], [out + "_q"], axis=0),
                helper.make_node("Cast", [out + "_q"], [out + "_f"], to=onnx.TensorProto.FLOAT),
                helper.make_node("Gather", [scale, ids], [out + "_s"], axis=0),
                helper.make_node("Mul", [out + "_f", out + "_s"], [out]),
            ]
            removed.update({id(cast), id(mul)})
            rewrites += 1
        elif node.op_type == "MatMul":
            parts = dequant_parts(node.input[1])
            if parts is None:
                continue
            weight, scale, cast, mul = parts
            if len(inits[scale].dims) > 2 or (len(inits[scale].dims) == 2 and inits[scale].dims[0] != 1):
                continue
            out = node.output[0]
            new_nodes[id(node)] = [
                helper.make_node("MatMul", [node.input[0], cast.output[0]], [out + "_unscaled"]),
                helper.make_node("Mul", [out + "_unscaled", scale], [out]),
            ]
            removed.add(id(mul))
            rewrites += 1
    nodes = []
    for node in graph.node:
        if id(node) in removed:
            continue
        nodes.extend(new_nodes.get(id(node), [node]))
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    onnx.save_model(
        model,
        dst,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=os.path.basename(dst) + ".data",
        size_threshold=1024,
    )
    print(f"{rewrites} dequantisations moved behind their Gather/MatMul")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
