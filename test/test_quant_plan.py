"""Quantization plans: parsing, the per-tensor rules and their fallbacks."""

import numpy as np
import pytest

from embodied_ros.bundle import BundleWriter, QuantPlan


def test_parse_forms():
    assert QuantPlan.parse("vision=f32, lm=Q8_0,expert=q4_k").types == {"vision": "f32", "lm": "q8_0", "expert": "q4_k"}
    assert QuantPlan.parse("q4_k").types == {"default": "q4_k"}
    assert QuantPlan.parse("lm=q8_0,default=f16").type_for("vision") == "f16"
    assert QuantPlan.parse(None).type_for("anything") == "f32"
    assert QuantPlan.parse("").type_for("anything") == "f32"
    plan = QuantPlan.parse("vision=bf16,default=q8_0")
    assert QuantPlan.parse(str(plan)) == plan


@pytest.mark.parametrize("text,message", [("lm=q3_k", "unknown type"), ("lm=q8_0,lm=f16", "twice"),
                                          ("=q8_0", "empty group")])
def test_parse_errors(text, message):
    with pytest.raises(ValueError, match=message):
        QuantPlan.parse(text)


def test_rules():
    plan = QuantPlan.parse("lm=q4_k,expert=q8_0,default=f16")
    assert plan.choose("lm", (64, 512)).qtype == "q4_k"
    assert plan.choose("lm", (512,)).qtype == "f32"  # 1-D (norms, biases) stay f32
    assert plan.choose("lm", (4, 2, 3)).qtype == "f16"  # last dim 3: q4_k -> q8_0 -> f16
    fallback = plan.choose("lm", (64, 384))
    assert fallback.qtype == "q8_0" and "384" in fallback.reason and "256" in fallback.reason
    assert plan.choose("expert", (8, 100)).qtype == "f16"
    assert plan.choose("vision", (8, 100)).qtype == "f16"
    assert plan.choose("lm", (64, 512)).reason == ""


def test_plan_naming_an_unknown_group_is_refused():
    plan = QuantPlan.parse("visoin=q8_0")
    with pytest.raises(ValueError, match="visoin.*vision"):
        plan.check_groups({"vision", "lm"})
    QuantPlan.parse("default=q8_0").check_groups({"vision"})


def test_writer_applies_plan_with_its_own_grouping():
    writer = BundleWriter("toy", "attention=q8_0,ffn=q4_k",
                          group_of=lambda name: "attention" if ".attn." in name else "ffn")
    writer.add_weight("blk.0.attn.q.weight", np.ones((4, 64), np.float32))
    writer.add_weight("blk.0.mlp.up.weight", np.ones((4, 256), np.float32))
    writer.add_weight("blk.0.mlp.down.weight", np.ones((4, 96), np.float32))
    writer.add_weight("blk.0.mlp.up.bias", np.ones(4, np.float32))
    report = {name: (qtype, reason) for name, _, qtype, reason in writer.plan_report()}
    assert report["blk.0.attn.q.weight"] == ("q8_0", "")
    assert report["blk.0.mlp.up.weight"] == ("q4_k", "")
    assert report["blk.0.mlp.down.weight"][0] == "q8_0" and report["blk.0.mlp.down.weight"][1]
    assert report["blk.0.mlp.up.bias"] == ("f32", "fewer than 2 dimensions")
