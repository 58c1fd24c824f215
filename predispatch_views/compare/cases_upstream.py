"""PyTorch's own aliasing tests, ported: the programs of test/functorch/test_aotdispatch.py.

Each case is the program of one upstream test (the verify_aot_autograd family and its neighbours: outputs that
alias inputs or intermediates, input data and metadata mutations, ``set_``, duplicated and aliased inputs, custom
autograd.Functions, detach), rewritten in the library's form; ``note`` names the upstream test. Upstream also
asserts AOTAutograd's own graphs: those assertions are dropped, and the programs are compared with eager by every
probe like any other case. Where an upstream test runs one program on several inputs (requires_grad or not,
several aliasing layouts), each input is its own case.

How upstream's inputs are rebuilt:

- ``test_mutation=True`` passes ``leaf.add(1)``, a non-leaf the program may mutate in place, and reads the leaf's
  ``.grad``: ``mutable`` does the same.
- Aliased inputs are views of one non-leaf base ``leaf.add(1)`` (``aliased``); the base is an ``extra`` input the
  probes watch, the leaf gets the grads.
- Duplicated inputs are the same tensor object passed twice.

Module tests whose module mutates a buffer are ported as functions taking the buffer as an argument: a module
shared by every strategy would carry its buffer from one strategy's calls to the next.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn import functional as F

from .case_types import Case, InputFactory, Inputs, T, registrar, t

PREFIX = "upstream_"
SOURCE = "test_aotdispatch.py::"

# The ported cases, in order; cases.CASES appends them to the library's.
UPSTREAM_CASES: list[Case] = []
case = registrar(UPSTREAM_CASES)


# ---------------------------------------------------------------------------------------------------------
# Input factories.
# ---------------------------------------------------------------------------------------------------------


def plain(*items: Any) -> InputFactory:
    """Arguments as given: a ``T`` is built (a leaf), anything else (None, an int) is passed as is."""

    def factory(gen: torch.Generator, device: str) -> Inputs:
        args = tuple(i.build(gen, device) if isinstance(i, T) else i for i in items)
        return Inputs(args, tuple(a for a in args if isinstance(a, torch.Tensor) and a.requires_grad))

    return factory


def mutable(*specs: T) -> InputFactory:
    """Upstream's ``test_mutation=True``: each argument is ``leaf.add(1)``; the leaves get the grads."""

    def factory(gen: torch.Generator, device: str) -> Inputs:
        leaves = tuple(s.build(gen, device) for s in specs)
        return Inputs(tuple(leaf.add(1) for leaf in leaves), tuple(x for x in leaves if x.requires_grad))

    return factory


def aliased(*shapes: tuple[int, ...], rg: bool, views: Callable[..., tuple[Any, ...]]) -> InputFactory:
    """Arguments that are views of non-leaf bases ``leaf.add(1)``, one base per shape."""

    def factory(gen: torch.Generator, device: str) -> Inputs:
        leaves = tuple(T(s, rg).build(gen, device) for s in shapes)
        bases = tuple(leaf.add(1) for leaf in leaves)
        return Inputs(tuple(views(*bases)), leaves if rg else (), bases)

    return factory


def port(
    test: str,
    inputs: Callable[[bool], InputFactory],
    *,
    grads: tuple[bool, ...] = (True, False),
    fast: bool = False,
    name: str | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register ``upstream_<name>`` for inputs that require grad and ``..._no_grad`` for inputs that do not.

    ``name`` defaults to the function's; ``fast`` marks the first variant only.
    """

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        for k, rg in enumerate(grads):
            full = PREFIX + (name or fn.__name__) + ("" if rg else "_no_grad")
            case(inputs(rg), name=full, note=SOURCE + test, fast=fast and k == 0)(fn)
        return fn

    return register


def port1(test: str, inputs: InputFactory, *, fast: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register one case, ``upstream_<fn name>``."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        return case(inputs, name=PREFIX + fn.__name__, note=SOURCE + test, fast=fast)(fn)

    return register


def _m33(rg: bool) -> InputFactory:
    return mutable(t(3, 3, rg=rg))


def _m22x(n: int) -> Callable[[bool], InputFactory]:
    return lambda rg: mutable(*(t(2, 2, rg=rg) for _ in range(n)))


# ---------------------------------------------------------------------------------------------------------
# Non-tensor arguments, plain outputs.
# ---------------------------------------------------------------------------------------------------------


@port("test_non_tensor_and_none_inputs", lambda rg: plain(2, None, t(3, 3, rg=rg)))
def non_tensor_and_none_inputs(a: int, b: None, c: torch.Tensor) -> Any:
    return a * c


@port("test_multi_output_list", lambda rg: plain(t(3, 3, rg=rg), t(3, 3, rg=False)), grads=(True,))
def multi_output_list(a: torch.Tensor, b: torch.Tensor) -> Any:
    return [a + b, a - b]


@port("test_squeeze_mutation", lambda rg: plain(t(3, 1, rg=rg)))
def squeeze_mutation(a: torch.Tensor) -> Any:
    b = a.clone().squeeze(-1)
    b.add_(1.0)
    return a + b


# ---------------------------------------------------------------------------------------------------------
# Input data mutations.
# ---------------------------------------------------------------------------------------------------------


@port("test_input_mutation_simple", _m33)
def input_mutation_simple(a: torch.Tensor) -> Any:
    a.mul_(2)
    return a * 3


@port("test_input_mutation_is_output", _m33, fast=True)
def input_mutation_is_output(a: torch.Tensor) -> Any:
    a.mul_(2)
    return a


@port("test_input_mutation_multiple", lambda rg: mutable(t(3, 3, rg=rg), t(3, 3, rg=rg), t(3, 3, rg=rg)))
def input_mutation_multiple(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Any:
    a.mul_(2)
    c.mul_(2)
    return a + b + c


@port("test_input_mutation_requires_grad_detach", lambda rg: plain(t(4)), grads=(True,))
def input_mutation_requires_grad_detach_leaf(a: torch.Tensor) -> Any:
    a.detach().mul_(2)
    return a + 3


@port("test_input_mutation_requires_grad_detach", lambda rg: mutable(t(4)), grads=(True,))
def input_mutation_requires_grad_detach(a: torch.Tensor) -> Any:
    a.detach().mul_(2)
    return a + 3


@port("test_input_mutation_requires_grad_no_grad", lambda rg: mutable(t(4)), grads=(True,))
def input_mutation_requires_grad_no_grad(a: torch.Tensor) -> Any:
    with torch.no_grad():
        a.mul_(2)
    return a + 3


@port("test_input_mutation_requires_grad_no_grad_inference_graph", lambda rg: mutable(t(4)), grads=(True,))
def input_mutation_requires_grad_no_grad_inference_graph(a: torch.Tensor) -> Any:
    with torch.no_grad():
        a.mul_(2)
        return a + 3


@port("test_input_mutation_requires_grad_no_grad_detach_mixed", lambda rg: mutable(t(4)), grads=(True,), fast=True)
def input_mutation_requires_grad_no_grad_detach_mixed(a: torch.Tensor) -> Any:
    a.detach().mul_(2)
    a.mul_(3)
    with torch.no_grad():
        a.mul_(4)
    return a + 5


@port("test_aot_export_input_mutation_on_input_requiring_grad_banned", lambda rg: plain(t(2)), grads=(True,))
def input_mutation_on_leaf_requiring_grad(x: torch.Tensor) -> Any:
    x.add_(4)  # eager: a leaf that requires grad mutated in place raises
    return (x,)


@port("test_new_inp_requires_grad_now", lambda rg: plain(t(4, 5, rg=False), t(4, 5)), grads=(True,))
def new_inp_requires_grad_now(x: torch.Tensor, y: torch.Tensor) -> Any:
    return x.add_(y)


@port("test_mutates_input_noncontiguous", lambda rg: aliased((4,), rg=rg, views=lambda x: (x[0::2],)))
def mutates_input_noncontiguous(a: torch.Tensor) -> Any:
    a.add_(1)
    return ()


@port("test_input_mutation_noncontiguous", lambda rg: aliased((2, 2), rg=rg, views=lambda x: (x[:, 0],)))
def input_mutation_noncontiguous(a: torch.Tensor) -> Any:
    a.mul_(2)
    return a + 1


def _input_with_a_view(gen: torch.Generator, device: str) -> Inputs:
    leaf = t(3, 3).build(gen, device)
    x = leaf.add(1)
    return Inputs((x,), (leaf,), (x.view(3, 3),))  # the view the program's mutation must reach


@port("test_input_mutation_modifies_autograd_meta_of_aliases", lambda rg: _input_with_a_view, grads=(True,))
def input_mutation_modifies_autograd_meta_of_aliases(a: torch.Tensor) -> Any:
    a.mul_(2)
    out = a + 1
    return out.detach()


@port("test_default_partitioner_saves_symints_not_tensors_for_bw", lambda rg: mutable(t(2, 2)), grads=(True,))
def masked_fill_through_select_of_input(a: torch.Tensor) -> Any:
    b = a[0]
    c = torch.ones_like(b, dtype=torch.bool)
    return b.masked_fill_(c, 0)


@port("test_buffer_copied_in_graph", lambda rg: plain(t(1), t(1, rg=False), t(1), t(1)), grads=(True,))
def buffer_copied_in_graph(x: torch.Tensor, buf: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> Any:
    buf.add_(1)
    return (w1 * x * w2).sum() + buf.sum()


@port(
    "test_buffer_copied_in_graph_with_different_shapes",
    lambda rg: plain(t(2, 4), t(4, 4, rg=False), t(4, 2)),
    grads=(True,),
)
def buffer_copied_in_graph_with_different_shapes(x: torch.Tensor, buf: torch.Tensor, w: torch.Tensor) -> Any:
    buf.add_(1)
    return (w @ x).sum() + buf.sum()


def _batch_norm_inputs(rg: bool) -> InputFactory:
    return plain(t(2, 5, 5, 5, rg=rg), t(5, rg=rg), t(5, rg=rg), t(5, rg=False), T((5,), False))


@port("test_input_mutation_batchnorm", _batch_norm_inputs)
def input_mutation_batchnorm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor
) -> Any:
    # Upstream calls torch._native_batch_norm_legit(..., training=True, momentum=0.5, eps=1e-5); the public form.
    running_var.abs_()  # a valid variance (the factory draws randn)
    return F.batch_norm(x, running_mean, running_var, weight, bias, training=True, momentum=0.5, eps=1e-5)


@port(
    "test_buffer_batch_norm", lambda rg: plain(t(20, 10), t(10), t(10), t(10, rg=False), t(10, rg=False)), grads=(True,)
)
def buffer_batch_norm(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, running_mean: torch.Tensor, running_var: torch.Tensor
) -> Any:
    # BatchNorm1d in training mode, its buffers passed as arguments.
    running_var.abs_()
    return F.batch_norm(x, running_mean, running_var, weight, bias, training=True)


# ---------------------------------------------------------------------------------------------------------
# set_.
# ---------------------------------------------------------------------------------------------------------


@port("test_input_mutation_set__input_mutation", _m33, fast=True)
def input_mutation_set__input_mutation(a: torch.Tensor) -> Any:
    b = torch.arange(9, dtype=a.dtype).reshape(3, 3)
    with torch.no_grad():
        a.set_(b)
    return a * b


@port("test_set__steals_view_chain", lambda rg: plain(t(3, 3, rg=False), t(3, 9, rg=False)), grads=(False,))
def set__steals_view_chain(a: torch.Tensor, b: torch.Tensor) -> Any:
    a_ = a.mul(2)
    b_ = b.mul(2)
    b_slice = b_[1].view(3, 3)
    a_.set_(b_slice)
    a_.view(-1).mul_(2)
    return a_ * b_slice


@port("test_set__and_data_mutation_good", lambda rg: mutable(t(3, 3, rg=rg), t(3, 3, rg=rg)))
def set__and_data_mutation_good(a: torch.Tensor, b: torch.Tensor) -> Any:
    with torch.no_grad():
        a.set_(b)
    b.mul_(2)
    return a + b


@port("test_set__and_data_mutation_bad", lambda rg: mutable(t(3, 3)), grads=(True,))
def set__and_data_mutation_bad(a: torch.Tensor) -> Any:
    a_view = a.view(-1)
    tmp = torch.ones(3, 3, requires_grad=True)
    with torch.no_grad():
        a.set_(tmp)
    a_view.mul_(2)
    return a + tmp


@port("test_input_mutation_set__nop", _m33)
def input_mutation_set__nop(a: torch.Tensor) -> Any:
    b = torch.arange(9, dtype=a.dtype)
    a_old = torch.ops.aten.alias.default(a)
    with torch.no_grad():
        a.set_(b)
        a.set_(a_old)
    return a + b.reshape(3, 3)


# ---------------------------------------------------------------------------------------------------------
# Input metadata mutations.
# ---------------------------------------------------------------------------------------------------------


@port("test_input_mutation_metadata", lambda rg: mutable(t(3, 3, rg=rg), t(3, 3, rg=rg)), fast=True)
def input_mutation_metadata(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.transpose_(1, 0)
    return a + b


@port("test_input_mutation_metadata2", _m33)
def input_mutation_metadata2(a: torch.Tensor) -> Any:
    a.transpose_(1, 0)
    a.mul_(2)
    return a + 1


@port("test_input_data_and_metadata_mutation", _m33)
def input_data_and_metadata_mutation(a: torch.Tensor) -> Any:
    a.t_()
    a[0].mul_(2)
    return a.view(a.shape)


@port("test_view_and_inplace_view", lambda rg: mutable(t(3, 3, rg=rg), t(3, 3, rg=rg)))
def view_and_inplace_view(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.t_()
    return b.view(b.shape), a.view(a.shape)


@port("test_aot_export_metadata_mutation_banned", lambda rg: plain(t(2, 4, rg=False)), grads=(False,))
def metadata_mutation_of_input(x: torch.Tensor) -> Any:
    x.t_()
    return (x * 2,)


@port("test_input_inplace_requires_grad_true", lambda rg: mutable(t(3, 3, rg=False), t(3, 3)), grads=(True,))
def input_inplace_requires_grad_true(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.requires_grad_(True)
    return a.mul(3), b.mul(4)


# TestAOTDispatch runs these on TwoTensor subclasses; here on plain tensors.


@port("test_aot_dispatch_input_mutation", lambda rg: mutable(t(3, 3, rg=rg), t(3, 3, rg=rg)))
def two_input_mutations(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.mul_(2)
    b.mul_(3)
    return a + b


@port("test_aot_dispatch_input_metadata_mutation", lambda rg: mutable(t(3, 3, rg=rg), t(3, 3, rg=rg)))
def two_input_metadata_mutations(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.t_()
    b.unsqueeze_(0)
    return a + b


@port("test_aot_dispatch_input_data_and_metadata_mutation", lambda rg: mutable(t(3, 3, rg=rg), t(3, 3, rg=rg)))
def two_input_data_and_metadata_mutations(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.t_()
    b.unsqueeze_(0)
    a.mul_(2)
    b.mul_(3)
    return a + b


@port("test_aot_dispatch_input_mutation_and_output_alias", lambda rg: mutable(t(3, 3, rg=rg), t(3, 3, rg=rg)))
def input_mutations_and_output_alias(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.mul_(2)
    b.mul_(3)
    return b.view(b.shape), a + b


@port("test_aot_module_simplified_preserves_stack_trace_from_mutation", lambda rg: mutable(t(4, 5, rg=rg)))
def mutate_select_of_input(x: torch.Tensor) -> Any:
    x_view = x[0]
    x_view.mul_(2)
    return (x + x,)


# ---------------------------------------------------------------------------------------------------------
# Outputs that are views of inputs.
# ---------------------------------------------------------------------------------------------------------


@port("test_input_output_view_simple", lambda rg: mutable(t(2, 2, rg=rg)), fast=True)
def input_output_view_simple(a: torch.Tensor) -> Any:
    return a.view(-1)


@port("test_input_output_view_mutate_multiple", _m22x(3))
def input_output_view_mutate_multiple(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Any:
    a.mul_(2)
    c.mul_(3)
    return b.view(2, 2), c.view(2, 2)


@port("test_input_output_view_metadata_mutate_multiple", _m22x(3))
def input_output_view_metadata_mutate_multiple(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Any:
    b.mul_(3)
    c.t_()
    return a.view(2, 2), b.view(2, 2), c.view(2, 2)


@port("test_input_mutation_and_output_view", lambda rg: mutable(t(2, 2, rg=rg)))
def input_mutation_and_output_view(a: torch.Tensor) -> Any:
    a.add_(1)
    return a.view(-1)


@port("test_input_mutation_output_view_multiple", _m22x(4))
def input_mutation_output_view_multiple(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor) -> Any:
    b.transpose_(1, 0)
    c.add_(1)
    return d + 1, b.diagonal(), a + c


@port("test_output_all_alias_types", lambda rg: aliased((1, 2, 4), rg=rg, views=lambda x: (x,)))
def output_all_alias_types(a: torch.Tensor) -> Any:
    a.transpose_(1, 0)
    tmp = a.mul(2)
    return tmp.squeeze(), tmp.transpose(1, 0), a.unsqueeze(0)


@port("test_subclass_metadata_mutation", lambda rg: aliased((1, 2, 4), rg=rg, views=lambda x: (x,)))
def metadata_mutation_then_view_of_intermediate(a: torch.Tensor) -> Any:
    # Upstream runs it on TwoTensor subclasses (and expects an error); here on plain tensors.
    a.transpose_(1, 0)
    tmp = a.mul(2)
    return tmp.transpose(1, 0)


@port("test_view_detach", _m33)
def view_detach(a: torch.Tensor) -> Any:
    tmp = a.detach()
    a.mul_(2)
    return a, tmp


@port("test_some_output_requires_grad_input_doesnt", lambda rg: plain(t(3, 3, rg=False), t(3, 3)), grads=(True,))
def some_output_requires_grad_input_doesnt(a: torch.Tensor, b: torch.Tensor) -> Any:
    a_view = a.view(-1)
    a_view.requires_grad_(True)
    return a_view


@port("test_some_outputs_dont_require_grad_view", lambda rg: plain(t(3, 3), t(3, 3)), grads=(True,))
def some_outputs_dont_require_grad_view(a: torch.Tensor, b: torch.Tensor) -> Any:
    return a.detach(), b


@port("test_some_outputs_dont_require_grad_non_view", lambda rg: plain(t(3, 3), t(3, 3)), grads=(True,))
def some_outputs_dont_require_grad_non_view(a: torch.Tensor, b: torch.Tensor) -> Any:
    return a.add(1).detach(), b


@port("test_output_dict", lambda rg: plain(t(3, 3)), grads=(True,))
def output_dict_same_input(x: torch.Tensor) -> Any:
    return {"a": x, "b": x}


@port("test_output_dict", lambda rg: plain(t(3), t(3, rg=False)), grads=(True,))
def output_dict_input_and_sum(x: torch.Tensor, y: torch.Tensor) -> Any:
    return {"a": x, "b": y + x}


def _dict_input(gen: torch.Generator, device: str) -> Inputs:
    a, b = t(3).build(gen, device), t(3).build(gen, device)
    return Inputs(({"a": a, "b": b},), (a, b))


@port("test_output_dict", lambda rg: _dict_input, grads=(True,))
def output_dict_from_dict_input(x: dict[str, torch.Tensor]) -> Any:
    return {k: x[k] * 2 for k in x}


@port("test_output_op_depending_on_symint", lambda rg: plain(t(5)), grads=(True,))
def expand_input_to_its_shape(x: torch.Tensor) -> Any:
    return x.expand(x.shape)


@port("test_contiguous", lambda rg: plain(t(6)), grads=(True,))
def view_then_t_of_input(x: torch.Tensor) -> Any:
    return x.view(2, 3).t()


@port("test_aot_export_simplified_basic", lambda rg: plain(t(2), t(2)), grads=(True,))
def output_uses_detach_of_input(x: torch.Tensor, y: torch.Tensor) -> Any:
    return x * y, y * y.detach()


# ---------------------------------------------------------------------------------------------------------
# Outputs that alias intermediates, and each other.
# ---------------------------------------------------------------------------------------------------------


@port("test_outputs_are_aliased", lambda rg: plain(t(3, rg=rg)))
def outputs_are_aliased(a: torch.Tensor) -> Any:
    b = a.mul(2)
    c = b.view(-1)
    return b, c


@port("test_output_aliases_intermediate_single", _m33, fast=True)
def output_aliases_intermediate_single(a: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    return out.view(-1)


@port("test_output_aliases_intermediate_mutation_linear", lambda rg: plain(t(3, 3)), grads=(True,))
def output_aliases_intermediate_mutation_linear(x: torch.Tensor) -> Any:
    return (x + 1).view(-1)


@port("test_output_aliases_intermediate_no_grad", lambda rg: mutable(t(3, 3, rg=False), t(3, 3, rg=rg)))
def output_aliases_intermediate_no_grad(a: torch.Tensor, b: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    return out.view(-1), b.add(1)


@port("test_output_aliases_intermediate_returned_multiple_times", _m33)
def output_aliases_intermediate_returned_multiple_times(a: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    out_view = out.view(-1)
    return out, out_view, out


@port("test_output_aliases_intermediate_multiple", _m33)
def output_aliases_intermediate_multiple(a: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    return out.view(-1), out.view(-1)


@port("test_output_aliases_intermediate_and_returned", _m33)
def output_aliases_intermediate_and_returned(a: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    return out.view(-1), out


@port("test_output_aliases_intermediate_and_returned_flipped", _m33)
def output_aliases_intermediate_and_returned_flipped(a: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    return out, out.view(-1)


@port("test_output_aliases_intermediate_and_returned_different_grad", _m33, fast=True)
def output_aliases_intermediate_and_returned_different_grad(a: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    return out.view(-1), out, out[0].detach()


@port("test_output_aliases_intermediate_inplace_view", lambda rg: mutable(t(2, 4)), grads=(True,))
def output_aliases_intermediate_inplace_view(a: torch.Tensor) -> Any:
    # Upstream leaves this one disabled (pytorch #90507).
    out = torch.mul(a, 3)
    out.t_()
    return out


@port("test_output_aliases_intermediate_inplace_view_with_detach", lambda rg: mutable(t(2, 4, rg=rg)))
def output_aliases_intermediate_inplace_view_with_detach(a: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    out.t_()
    out.detach_()
    return out, a + 1


@port("test_output_aliases_intermediate_inplace_view_and_view", lambda rg: mutable(t(2, 4)), grads=(True,))
def output_aliases_intermediate_inplace_view_and_view(a: torch.Tensor) -> Any:
    # Upstream leaves this one disabled.
    out = torch.mul(a, 3)
    out_view = out.unsqueeze(0)
    out.t_()
    out_view2 = out.unsqueeze(0)
    return out_view, out, out_view2


@port("test_output_aliases_intermediate_multiple_mixed", _m33)
def output_aliases_intermediate_multiple_mixed(a: torch.Tensor) -> Any:
    out1 = torch.mul(a, 3)
    out2 = torch.mul(a, 4)
    return out1.view(-1), out2.transpose(1, 0), out1.transpose(1, 0)


# ---------------------------------------------------------------------------------------------------------
# Multi-output views (unbind, split) of inputs and intermediates.
# ---------------------------------------------------------------------------------------------------------


@port(
    "test_output_aliases_input_multi_output_view_should_raise_autograd_error",
    lambda rg: mutable(t(3, 3)),
    grads=(True,),
)
def output_aliases_input_multi_output_view_should_raise_autograd_error(a: torch.Tensor) -> Any:
    return list(a.unbind(0))


@port("test_output_aliases_input_multi_output_view", lambda rg: plain(t(3, 3)), grads=(True,))
def output_aliases_input_multi_output_view(a: torch.Tensor) -> Any:
    return list(a.unbind(0))


@port("test_output_aliases_input_multi_output_view", lambda rg: mutable(t(3, 3)), grads=(True,), fast=True)
def output_aliases_input_multi_output_view_and_view(a: torch.Tensor) -> Any:
    return *list(a.unbind(0)), a.view(a.shape)


@port("test_output_aliases_intermediate_multi_output_view", lambda rg: plain(t(3, 3, rg=rg)))
def output_aliases_intermediate_multi_output_view(a: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    return list(out.unbind(0))


@port("test_output_aliases_intermediate_multi_output_view", lambda rg: plain(t(3, 3)), grads=(True,))
def output_aliases_intermediate_multi_output_view_and_base(a: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    return *list(out.unbind(0)), out


@port("test_output_aliases_intermediate_multi_output_view", lambda rg: plain(t(3, 3)), grads=(True,))
def output_aliases_intermediate_multi_output_view_and_view(a: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    return *list(out.unbind(0)), out.view(out.shape)


@port("test_output_aliases_intermediate_multi_output_view", lambda rg: plain(t(3, 3)), grads=(True,), fast=True)
def output_aliases_intermediate_multi_output_view_base_and_view(a: torch.Tensor) -> Any:
    out = torch.mul(a, 3)
    return *list(out.unbind(0)), out, out.view(out.shape)


@port("test_mem_leak_from_save_for_bw", lambda rg: plain(t(8, 8), t(1, 4, 1)), grads=(True,))
def split_output_saved_for_backward(a: torch.Tensor, b: torch.Tensor) -> Any:
    add = a + a
    split = torch.functional.split(add, [4, 4], dim=1)
    getitem_2 = split[1]
    unsqueeze = getitem_2.unsqueeze(-1)
    mul = unsqueeze * b
    return getitem_2, mul


# ---------------------------------------------------------------------------------------------------------
# Aliased inputs (views of one base), with and without mutations.
# ---------------------------------------------------------------------------------------------------------


@port(
    "test_input_data_and_metadata_mutation_aliases_other_input",
    lambda rg: aliased((2, 2), rg=rg, views=lambda x: (x[0], x[0])),
    fast=True,
)
def input_data_and_metadata_mutation_aliases_other_input(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.mul_(2)
    b.t_()
    return a.mul(b)


@port(
    "test_output_aliases_multiple_inputs_get_correct_one",
    lambda rg: aliased((2, 2), rg=rg, views=lambda x: (x.view(-1), x[0])),
)
def output_aliases_multiple_inputs_get_correct_one(a: torch.Tensor, b: torch.Tensor) -> Any:
    return a.view(a.shape), b.view(b.shape)


@port("test_input_mutation_aliases_other_input", lambda rg: aliased((4, 2), rg=rg, views=lambda x: (x[0], x[0])))
def input_mutation_aliases_other_input(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.add_(1)
    return a + b


@port("test_input_mutation_aliases_other_input2", lambda rg: aliased((2, 2), rg=rg, views=lambda x: (x[0], x)))
def input_mutation_aliases_other_input2(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.add_(1)
    return a + b


@port(
    "test_input_mutation_aliases_and_output_alias",
    lambda rg: aliased((2, 2), rg=rg, views=lambda x: (x.view(-1), x.view(-1))),
    fast=True,
)
def input_mutation_aliases_and_output_alias(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.add_(1)
    return b.view(b.shape)


@port(
    "test_input_aliased_with_mutation_output_alias",
    lambda rg: aliased((2, 2), (2, 2), rg=rg, views=lambda x, y: (x.view(-1), y, x.view(-1))),
)
def input_aliased_with_mutation_output_alias(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Any:
    c.mul_(2)
    return b.add(1), c.view(-1)


@port(
    "test_input_metadata_mutation_aliases", lambda rg: aliased((2, 2), rg=rg, views=lambda x: (x.view(-1), x.view(-1)))
)
def input_metadata_mutation_aliases(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.t_()
    return a + b


def _none_require_gradients(rg: bool) -> InputFactory:
    def factory(gen: torch.Generator, device: str) -> Inputs:
        base = t(2, 2, rg=False).build(gen, device)
        c = t(2, 2, rg=rg).build(gen, device)
        x = base.add(1)
        return Inputs((x.view(-1), x.view(-1), c), (c,) if rg else (), (x,))

    return factory


@port("test_input_mutation_aliases_and_none_require_gradients", _none_require_gradients)
def input_mutation_aliases_and_none_require_gradients(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Any:
    a.mul_(2)
    return b + 1, c + 1


@port(
    "test_input_mutation_aliases_bases_out_of_order",
    lambda rg: aliased(
        (2, 2), (2, 2), rg=rg, views=lambda x1, x2: (x1.view(-1), x2.view(-1), x1.view(-1), x2.view(-1))
    ),
)
def input_mutation_aliases_bases_out_of_order(
    a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, d: torch.Tensor
) -> Any:
    b.add_(1)
    d.unsqueeze_(0)
    return a + c + d, b.view(-1)


def _detached_rows(gen: torch.Generator, device: str) -> Inputs:
    base = t(4, 4, rg=False).build(gen, device)
    return Inputs((base[0].detach(), base[1].detach()), (), (base,))


@port("test_synthetic_base_base_attribute_is_none", lambda rg: _detached_rows, grads=(False,))
def synthetic_base_base_attribute_is_none(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.add_(1)
    return a + b


@port(
    "test_input_mutation_alias_everything",
    lambda rg: aliased((2, 2), (2, 2), rg=rg, views=lambda x1, x2: (x1.view(-1), x2, x1.view(-1))),
    fast=True,
)
def input_mutation_alias_everything(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> Any:
    c.mul_(2)
    b.t_()
    tmp = a + c
    out1 = tmp.view(-1)
    out2 = b.t()
    out3 = out1.unsqueeze(0)
    return out1, out2, out3


def _input_and_view(gen: torch.Generator, device: str) -> Inputs:
    x = t(2, rg=False).build(gen, device)
    return Inputs((x, x.view(-1)), (), ())


@port("test_aot_export_synthetic_bases_banned", lambda rg: _input_and_view, grads=(False,))
def mutate_input_aliased_by_other_input(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.mul_(2)
    return (x + y,)


# test_input_mutation_false_aliasing: one program, inputs that share a storage with and without overlap.


def _false_aliasing(
    size: int | tuple[int, int], views: Callable[[torch.Tensor], tuple[Any, ...]]
) -> Callable[[bool], InputFactory]:
    shape = (size,) if isinstance(size, int) else size
    return lambda rg: aliased(shape, rg=rg, views=views)


_FALSE_ALIASING: dict[str, tuple[int | tuple[int, int], Callable[[torch.Tensor], tuple[Any, ...]]]] = {
    "rows": ((4, 4), lambda x: (x[0:2], x[2:4])),
    "strided_apart": (256, lambda x: (x.as_strided((4, 4), (8, 1), 0), x.as_strided((4, 4), (8, 1), 28))),
    "interleaved": ((4, 4), lambda x: (x[:, 0:2], x[:, 2:4])),
    "strided_22": (256, lambda x: (x.as_strided((4, 4), (9, 1), 0), x.as_strided((4, 4), (9, 1), 22))),
    "strided_23": (256, lambda x: (x.as_strided((4, 4), (9, 1), 0), x.as_strided((4, 4), (9, 1), 23))),
    "strided_then_slice": (256, lambda x: (x.as_strided((2, 4, 3), (110, 24, 4), 5), x[196 : 196 + 24])),
    "overlap_24": (256, lambda x: (x.as_strided((4, 4), (9, 1), 0), x.as_strided((4, 4), (9, 1), 24))),
    "overlap_25": (256, lambda x: (x.as_strided((4, 4), (9, 1), 0), x.as_strided((4, 4), (9, 1), 25))),
    "overlap_slice": (256, lambda x: (x.as_strided((2, 4, 3), (110, 24, 4), 5), x[195 : 195 + 24])),
}


def _input_mutation_false_aliasing(a: torch.Tensor, b: torch.Tensor) -> Any:
    a.mul_(3)
    b.mul_(2)
    return a.clone().view(-1) + b.clone().view(-1)


for _layout, (_size, _views) in _FALSE_ALIASING.items():
    port(
        "test_input_mutation_false_aliasing",
        _false_aliasing(_size, _views),
        grads=(True, False) if _layout == "rows" else (False,),
        name=f"input_mutation_false_aliasing_{_layout}",
        fast=_layout == "overlap_24",
    )(_input_mutation_false_aliasing)
del _layout, _size, _views


# ---------------------------------------------------------------------------------------------------------
# Duplicated inputs.
# ---------------------------------------------------------------------------------------------------------


def _dupes(spec: T, pattern: tuple[int, ...], *, clone: bool = False, others: tuple[T, ...] = ()) -> InputFactory:
    """Arguments drawn from ``1 + len(others)`` tensors by ``pattern`` (index 0 is ``spec``, maybe a clone)."""

    def factory(gen: torch.Generator, device: str) -> Inputs:
        leaves = (spec.build(gen, device), *(o.build(gen, device) for o in others))
        pool = (leaves[0].clone() if clone else leaves[0], *leaves[1:])
        return Inputs(tuple(pool[i] for i in pattern), tuple(x for x in leaves if x.requires_grad))

    return factory


@port1("test_dupe_arg", _dupes(t(3, 3), (0, 0)))
def dupe_arg(x: torch.Tensor, y: torch.Tensor) -> Any:
    return x + y


@port1("test_dupe_arg_torture", _dupes(t(3, 3), (0, 0), clone=True), fast=True)
def dupe_arg_torture(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.t_()
    y.unsqueeze_(0)
    return x + y


@port1("test_dupe_arg_returned_as_output", _dupes(t(2, rg=False), (0, 1, 0), others=(t(2, rg=False),)))
def dupe_arg_returned_as_output(a: torch.Tensor, b: torch.Tensor, a_: torch.Tensor) -> Any:
    a[0].add_(1)
    return a_


@port1("test_invalid_dupe_left_bias", _dupes(t(3, 3), (0, 0), clone=True))
def invalid_dupe_left_bias(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.t_()
    return (x + y,)


@port1("test_invalid_dupe", _dupes(t(3, 3), (0, 0), clone=True))
def invalid_dupe(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.unsqueeze_(0)
    y.unsqueeze_(0)
    return (x + y,)


@port1("test_invalid_dupe", mutable(t(3, 3), t(3, 3)))
def invalid_dupe_distinct(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.unsqueeze_(0)
    y.unsqueeze_(0)
    return (x + y,)


@port1("test_aot_export_input_dupes_banned", _dupes(t(2, rg=False), (0, 0)))
def dupe_arg_mutated(x: torch.Tensor, y: torch.Tensor) -> Any:
    x.mul_(2)
    return (x + y,)


# ---------------------------------------------------------------------------------------------------------
# Custom autograd.Functions.
# ---------------------------------------------------------------------------------------------------------


class ReturnsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x

    @staticmethod
    def backward(ctx: Any, gx: torch.Tensor) -> torch.Tensor:
        return gx * 0.5


class CloneGradPlusOne(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        return grad_output + 1


class MutatesSavedInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        x.mul_(2)
        return grad_output.clone()


class TransposesSavedInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.save_for_backward(b)
        return a.clone(), b.clone()

    @staticmethod
    def backward(ctx: Any, grad_a: torch.Tensor, grad_b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        (b,) = ctx.saved_tensors
        b.transpose_(1, 0)
        return grad_a.clone(), grad_b.clone()


class MutatesGradOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        grad_output.mul_(2)
        return grad_output.clone()


@port("test_input_output_aliase_custom_autograd_function", lambda rg: plain(t(2, 2)), grads=(True,))
def input_output_alias_custom_autograd_function(x: torch.Tensor) -> Any:
    return ReturnsInput.apply(x)


@port("test_custom_autograd", lambda rg: plain(t(3, rg=rg)), fast=True)
def custom_autograd(x: torch.Tensor) -> Any:
    return CloneGradPlusOne.apply(x)


@port("test_backward_mutation_data", lambda rg: mutable(t(3, 3), t(3, 3, rg=rg)))
def backward_mutation_data(a: torch.Tensor, b: torch.Tensor) -> Any:
    out = MutatesSavedInBackward.apply(b)
    return a * out


@port("test_backward_mutation_metadata", lambda rg: mutable(t(3, 3), t(3, 3, rg=False)), grads=(True,))
def backward_mutation_metadata(a: torch.Tensor, b: torch.Tensor) -> Any:
    a_, b_ = TransposesSavedInBackward.apply(a, b)
    return a_ * b_


@port("test_backward_mutation_on_grad_out", lambda rg: plain(t(3, 3), t(3, 3)), grads=(True,))
def backward_mutation_on_grad_out(a: torch.Tensor, b: torch.Tensor) -> Any:
    tmp = a * b
    return MutatesGradOutput.apply(tmp)


@port("test_inner_grad", lambda rg: plain(t()), grads=(True,))
def inner_grad(x: torch.Tensor) -> Any:
    y = torch.exp(x)
    return torch.autograd.grad(y, x)


# ---------------------------------------------------------------------------------------------------------
# Pre-dispatch export programs (TestAOTExport): grad-mode regions, ops that return their input.
# ---------------------------------------------------------------------------------------------------------


@port("test_aot_export_ban_dropout_mut_pre_dispatch", lambda rg: plain(t(2, 2, rg=False)), grads=(False,))
def eval_dropout_then_mutate(x: torch.Tensor) -> Any:
    y = F.dropout(x, 0.1, training=False)  # returns x itself: the add_ mutates the input
    y.add_(1)
    return (y,)


@port("test_aot_export_predispatch_func_simple", lambda rg: plain(t(2, 2, rg=rg)))
def no_grad_mutation_of_intermediate(x: torch.Tensor) -> Any:
    y = x + 2
    with torch.no_grad():
        y.add_(2)
    return (x * 2 + y,)


@port("test_aot_export_predispatch_func_composite_implicit", lambda rg: plain(t(2, 2, rg=rg)))
def enable_grad_matmul_then_mutate(x: torch.Tensor) -> Any:
    with torch.enable_grad():
        y = x @ x
    y.add_(2)
    return (x.sum() + y.sum(),)


@port("test_aot_export_predispatch_composite_implicit_inplace", lambda rg: plain(t(2, 2, rg=rg)))
def absolute_inplace_of_clone(x: torch.Tensor) -> Any:
    return (x.clone().absolute_(),)  # upstream: torch.ops.aten.absolute_.default


@port("test_aot_export_predispatch_func_view", lambda rg: plain(t(2, 2, rg=rg)))
def mutate_intermediate_then_view(x: torch.Tensor) -> Any:
    y = x @ x
    y.add_(2)
    return (x.sum() + y.view(1, 4).sum(),)


@port("test_aot_export_predispatch_with_autograd_op", lambda rg: plain(t(2, 2, rg=rg)))
def enable_grad_mutations(x: torch.Tensor) -> Any:
    with torch.enable_grad():
        y = x + 5
        y.add_(5)
        y.add_(7)
        return (x.cos() + y.sin(),)


@port(
    "test_aot_export_forward_mutation_multiple_mut",
    lambda rg: plain(t(6, 4, rg=rg), t(6, 4, rg=False), t(6, 4, rg=False)),
)
def input_and_buffer_mutations(x: torch.Tensor, y: torch.Tensor, buffer1: torch.Tensor) -> Any:
    y.add_(4)
    buffer1.add_(5)
    return (x.cos().sum() + y.sin().sum(), buffer1.sum())
