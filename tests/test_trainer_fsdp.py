"""The trainer under parameter sharding (trainer.sharded): FSDP2 on 2 gloo processes equals one process.

accelerate (1.15) never selects FSDP for CPU processes (an FSDP config with use_cpu runs DDP), so the
2-process run shards the student with torch's fully_shard itself (OPSD_FSDP2_CPU=1, what accelerate's
FSDP2 preparation does on GPUs): every decoder layer and the root are FSDP units, parameters are
DTensor shards, and the LM head runs inside the root's forward.
"""

from __future__ import annotations

import os
import subprocess

import pytest
import torch
from fixtures_trainer import one_thread, read_metrics, world, write_config  # noqa: F401 (fixtures)
from test_trainer import _split, resolve

from opsd_diag import jobs
from trainer import cli, sharded
from opsd_diag.engine.train_step import CompletionHidden
from opsd_diag.engine.train_step import MicroBatch
from trainer.setup import prepare
from opsd_diag.engine.train_step import micro_batch_backward

ENV = {"OMP_NUM_THREADS": "1"}


def _grads(st, mbs, n_global, fn, wrapper):
    st.roles.student.zero_grad(set_to_none=True)
    for mb in mbs:
        fn(wrapper(st.roles.student), st.roles, mb, st.loss, pad_id=st.pad_id, chunk_size=st.chunk_size,
           scale=1.0 / n_global, ref=st.reference)
    return {n: p.grad.clone() for n, p in st.roles.student.named_parameters()}


@pytest.mark.parametrize("method", ["opd", "jsd", "opd2", "exopd"])
def test_loss_inside_the_wrapped_module_gives_the_same_gradients(world, method):
    """ShardedStudent (head + loss in forward, chunks checkpointed) == engine.train_step's collected gradients."""
    st = prepare(resolve(world, method=method), torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    rows = list(range(6))
    comps = [torch.randint(3, 250, (int(n),), generator=g).tolist() for n in (3, 9, 1, 6, 8, 2)]
    mb = MicroBatch(0, rows, [st.train.student_prompts[i] for i in rows], [st.train.teacher_prompts[i] for i in rows],
                    [st.train.base_prompts[i] for i in rows], comps, [False] * 6)
    n = mb.n_tokens
    ref = _grads(st, [mb], n, micro_batch_backward, CompletionHidden)
    got = _grads(st, [_split(mb, 0, 3), _split(mb, 3, 6)], n, sharded.micro_batch_backward, sharded.ShardedStudent)
    for name in ref:
        torch.testing.assert_close(got[name], ref[name], rtol=1e-5, atol=1e-7, msg=name)
    # a micro-batch without completion tokens still reaches every parameter (zero gradients, same collectives)
    empty = MicroBatch(0, [0], mb.student_prompts[:1], mb.teacher_prompts[:1], mb.base_prompts[:1], [[]], [False])
    st.roles.student.zero_grad(set_to_none=True)
    sharded.micro_batch_backward(sharded.ShardedStudent(st.roles.student), st.roles, empty, st.loss, pad_id=st.pad_id,
                                 chunk_size=st.chunk_size, scale=1.0, ref=st.reference)
    assert all(p.grad is not None and not p.grad.any() for p in st.roles.student.parameters())


@pytest.mark.slow
def test_two_process_gloo_fsdp2_equals_one_process_with_the_same_global_batch(world, tmp_path, capsys):
    single = write_config(tmp_path / "single.yaml", world, method="jsd", max_steps=4, per_device_train_batch_size=2,
                          gradient_accumulation_steps=2, generation_batch_size=2)
    fsdp = write_config(tmp_path / "fsdp.yaml", world, method="jsd", max_steps=4, per_device_train_batch_size=2,
                        generation_batch_size=2)
    argv = jobs.training_command(fsdp, tmp_path / "fsdp", num_processes=2)
    done = subprocess.run(argv, env={**os.environ, **ENV, sharded.CPU_ENV: "1"}, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    log = (tmp_path / "fsdp" / "stdout.log").read_text()
    assert "2 process(es)" in log and "sharded with FSDP2 on 2 CPU processes" in log
    assert cli.main([str(single), "--out", str(tmp_path / "single")]) == 0
    a, b = read_metrics(tmp_path / "single"), read_metrics(tmp_path / "fsdp")
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    for x, y in zip(a, b):
        assert x["tokens"] == y["tokens"]
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-4, abs=1e-6)
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], rel=1e-4)
    # the checkpoint holds the full (gathered) weights, the same as the one-process run's, and loads
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    ckpt = tmp_path / "fsdp" / "checkpoints" / "step-000004"
    got = load_file(ckpt / "model.safetensors")
    ref = load_file(tmp_path / "single" / "checkpoints" / "step-000004" / "model.safetensors")
    assert got.keys() == ref.keys()
    for k in ref:
        torch.testing.assert_close(got[k], ref[k], rtol=1e-4, atol=1e-6, msg=k)
    AutoModelForCausalLM.from_pretrained(ckpt)
    # no optimizer state was saved: resume refuses, a user error naming why
    assert cli.main([str(fsdp), "--out", str(tmp_path / "fsdp"), "--resume"]) == 2
    assert "comes from a sharded (FSDP) run" in capsys.readouterr().err


def test_the_bundled_fsdp2_accelerate_config_is_one_accelerate_reads_as_fsdp2():
    from accelerate.commands.config.config_args import ClusterConfig

    from conftest import REPO

    cfg = ClusterConfig.from_yaml_file(str(REPO / "sample_data" / "accelerate" / "fsdp2.yaml"))
    assert str(cfg.distributed_type).endswith("FSDP") and cfg.fsdp_config["fsdp_version"] == 2


@pytest.mark.parametrize("kind, version, refused", [("DEEPSPEED", None, "DeepSpeed is not supported"),
                                                    ("FSDP", 1, "FSDP version 1 is not supported"),
                                                    ("FSDP", 2, None), ("MULTI_CPU", None, None), ("NO", None, None)])
def test_deepspeed_and_fsdp1_are_refused_with_the_fix(kind, version, refused):
    """Both would train wrongly (the chunked head's gradients bypass DeepSpeed's engine; FSDP1 units take the
    head-outside path), so they are refused before anything is written."""
    from types import SimpleNamespace

    from accelerate.utils import DistributedType

    from opsd_diag.errors import OpsdError

    plugin = SimpleNamespace(fsdp_version=version) if version else None
    acc = SimpleNamespace(distributed_type=DistributedType[kind], state=SimpleNamespace(fsdp_plugin=plugin))
    if refused is None:
        sharded.check_supported(acc)
    else:
        with pytest.raises(OpsdError, match=refused) as e:
            sharded.check_supported(acc)
        assert "sample_data/accelerate/fsdp2.yaml" in str(e.value)


def test_the_private_fsdp2_internals_are_guarded_by_the_torch_version():
    from types import SimpleNamespace

    from opsd_diag.errors import OpsdError

    sharded.check_fsdp_torch()  # this torch is in range
    sharded.check_fsdp_torch("2.6.0")
    with pytest.raises(OpsdError, match=r"FSDP2 training needs torch >= 2.6 \(this is 2.5.1\)"):
        sharded.check_fsdp_torch("2.5.1")
    g = object()
    assert sharded._param_groups(SimpleNamespace(_fsdp_param_groups=[g, g])) == [g, g]  # torch >= 2.9
    assert sharded._param_groups(SimpleNamespace(_fsdp_param_group=g)) == [g]  # torch 2.6-2.8
    assert sharded._param_groups(SimpleNamespace(_fsdp_param_group=None)) == []
    with pytest.raises(OpsdError, match="FSDP2 internals changed"):
        sharded._param_groups(SimpleNamespace())


def test_fsdp2_students_sample_with_the_reference_loop_and_a_documented_reason(world):
    """The static engine refuses an FSDP2 unit (its hooks and re-allocated gathered weights defeat CUDA graphs: see
    engine.fast.fast_decode) and hands it to the reference sampler."""
    from opsd_diag.engine.fast import fast_decode

    st = prepare(resolve(world, method="opd"), torch.device("cpu"))
    unit = type("FSDPQwen3ForCausalLM", (type(st.roles.student),), {})  # what fully_shard renames the class to
    st.roles.student.__class__ = unit
    assert "FSDP" in fast_decode.unsupported_reason(st.roles.student)
    assert "Why not FSDP2 students" in fast_decode.__doc__
