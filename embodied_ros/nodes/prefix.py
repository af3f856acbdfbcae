"""Prefix builder node: image embeddings + instruction + state -> the prefix K/V cache."""

from __future__ import annotations

from embodied_ros.nodes.stage import StageNode


class PrefixNode(StageNode):
    stage = "prefix"

    def compute(self, step, inputs):
        return self.runtime.build_prefix(inputs["perception"], inputs["observation"])


def main(args=None) -> None:
    from embodied_ros.nodes.run import run_node

    run_node(PrefixNode, args)


if __name__ == "__main__":
    main()
