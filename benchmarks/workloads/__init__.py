"""Benchmark workloads, in the order the report shows them."""

from benchmarks.workloads.chain import Chain
from benchmarks.workloads.cnn import Conv2d, Pool2d, ResNet18Forward
from benchmarks.workloads.cnn_train import ResNet18Train
from benchmarks.workloads.compile_time import CompileTime
from benchmarks.workloads.dense import Dense
from benchmarks.workloads.elementwise import Gelu
from benchmarks.workloads.gemm import Gemm
from benchmarks.workloads.gpt import CharGptTrain, Gpt2SmallForward
from benchmarks.workloads.mlp_train import MlpTrain
from benchmarks.workloads.norms import LayerNorm, LayerNormGrad, RmsNorm, RmsNormGrad, Softmax, SoftmaxGrad
from benchmarks.workloads.transformer import TransformerBlock

WORKLOADS = [Gemm(), Dense(), Softmax(), LayerNorm(), RmsNorm(), SoftmaxGrad(), LayerNormGrad(), RmsNormGrad(), Gelu(), Chain(), MlpTrain(), TransformerBlock(), CharGptTrain(), Gpt2SmallForward(), Conv2d(), Pool2d(),
             ResNet18Forward(), ResNet18Train(), CompileTime()]


def by_name(names: list[str] | None, also_known: tuple[str, ...] = ()):
    """The workloads named (all when ``names`` is empty); names in ``also_known`` (studies)
    are accepted and skipped here."""
    if not names:
        return list(WORKLOADS)
    known = {w.name: w for w in WORKLOADS}
    missing = [n for n in names if n not in known and n not in also_known]
    if missing:
        from caramba.errors import ConfigError, did_you_mean

        raise ConfigError(f"unknown workload or study {missing[0]!r}; {did_you_mean(missing[0], [*known, *also_known])}")
    return [known[n] for n in names if n in known]
