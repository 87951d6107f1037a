"""``agentik._groups``: the one place exception groups are taken apart.

Hypothesis builds trees of groups of arbitrary depth over leaves of every kind
the call sites meet (errors, ``KeyboardInterrupt``, trio's real ``Cancelled``)
and checks each helper against what its call sites rely on.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from agentik._groups import innermost, leaves, lone_error, raise_lone_error


def _cancelled_instances(count: int) -> list[trio.Cancelled]:
    """Real ``Cancelled`` exceptions (trio gives no public constructor)."""

    async def catch() -> list[trio.Cancelled]:
        caught = []
        for _ in range(count):
            with trio.CancelScope() as scope:
                scope.cancel()
                try:
                    await trio.lowlevel.checkpoint()
                except trio.Cancelled as exc:
                    caught.append(exc)
        return caught

    return trio.run(catch)


CANCELLED = _cancelled_instances(6)

errors = st.sampled_from([ValueError, KeyError, OSError, RuntimeError]).map(lambda cls: cls("x"))
leaf_exceptions = st.one_of(
    errors,
    st.builds(KeyboardInterrupt),
    st.sampled_from(CANCELLED),
)


def group(members: Sequence[BaseException]) -> BaseExceptionGroup[BaseException]:
    return BaseExceptionGroup("nursery", list(members))


def trees(leaf: st.SearchStrategy[BaseException]) -> st.SearchStrategy[BaseException]:
    """A leaf, or a group of 1-4 trees: any depth, any fan-out."""
    return st.recursive(leaf, lambda inner: st.lists(inner, min_size=1, max_size=4).map(group))


def chain(leaf: BaseException, depth: int) -> BaseException:
    """``leaf`` inside ``depth`` groups of one member each."""
    for _ in range(depth):
        leaf = group([leaf])
    return leaf


def raised_by(
    body: BaseException, *, beside: type[BaseException] | tuple[()] = ()
) -> BaseException:
    """What leaves ``raise_lone_error`` when its body raises ``body``."""
    try:
        with raise_lone_error(beside=beside):
            raise body
    except BaseException as exc:  # any of them, by design: the test looks at which
        return exc
    raise AssertionError("nothing was raised")


class TestInnermost:
    @given(leaf_exceptions, st.integers(0, 8))
    def test_a_single_leaf_at_any_depth_is_itself(self, leaf: BaseException, depth: int) -> None:
        """One leaf under any number of one-member groups comes out as that leaf."""
        assert innermost(chain(leaf, depth)) is leaf

    @given(trees(leaf_exceptions), st.integers(0, 4))
    def test_several_leaves_stay_a_group_with_all_of_them(
        self, tree: BaseException, depth: int
    ) -> None:
        """A tree of several leaves stays a group, and loses none of them."""
        found = innermost(chain(tree, depth))
        tree_leaves = list(leaves(tree))
        if len(tree_leaves) == 1:
            assert found is tree_leaves[0]
        else:
            assert isinstance(found, BaseExceptionGroup)
            assert len(found.exceptions) > 1
            assert list(leaves(found)) == tree_leaves


class TestLeaves:
    @given(st.data())
    def test_every_leaf_once_in_order(self, data: st.DataObject) -> None:
        """The leaves a tree was built over come back, in order, none twice."""
        tree = data.draw(trees(leaf_exceptions))
        found = list(leaves(tree))
        assert all(not isinstance(leaf, BaseExceptionGroup) for leaf in found)
        # rebuild the same shape over fresh leaves: identity shows order and count
        fresh: list[BaseException] = []

        def rebuild(node: BaseException) -> BaseException:
            if isinstance(node, BaseExceptionGroup):
                return group([rebuild(inner) for inner in node.exceptions])
            fresh.append(ValueError(len(fresh)))
            return fresh[-1]

        copy = rebuild(tree)
        assert [id(leaf) for leaf in leaves(copy)] == [id(leaf) for leaf in fresh]
        assert len(found) == len(fresh)

    def test_a_plain_exception_is_its_own_leaf(self) -> None:
        error = OSError("disk")
        assert list(leaves(error)) == [error]


class TestRaiseLoneError:
    @given(trees(leaf_exceptions))
    def test_a_nursery_group_of_one_is_what_the_body_raised(self, body: BaseException) -> None:
        """As if there were no nursery: the body's error comes out as itself, a
        group the body raised included (one level is unwrapped, not more)."""
        assert raised_by(group([body])) is body

    @given(st.lists(trees(leaf_exceptions), min_size=2, max_size=4))
    def test_a_group_of_several_stays_the_same_group(self, members: list[BaseException]) -> None:
        """Several errors: hiding one would lose the others; the group is re-raised as is."""
        several = group(members)
        raised = raised_by(several)
        assert raised is several
        assert raised.__cause__ is None
        assert not raised.__suppress_context__

    @given(leaf_exceptions)
    def test_a_lone_cancel_or_interrupt_is_raised_as_itself(self, leaf: BaseException) -> None:
        """Cancelled and KeyboardInterrupt get no special case, as before."""
        raised = raised_by(group([leaf]))
        assert raised is leaf
        assert raised.__suppress_context__  # raised ``from None``: no group in its traceback

    @given(leaf_exceptions)
    def test_what_is_not_a_group_passes_untouched(self, leaf: BaseException) -> None:
        assert raised_by(leaf) is leaf

    def test_no_error_no_change(self) -> None:
        with raise_lone_error():
            pass


class TestBeside:
    """``beside=trio.Cancelled``: a turn's tool tasks raise nothing but
    Cancelled, so one other error beside them is the body's own."""

    @given(errors, st.lists(st.sampled_from(CANCELLED), max_size=4), st.randoms())
    def test_one_error_beside_cancels_is_raised_as_itself(
        self, error: BaseException, cancels: list[trio.Cancelled], random: object
    ) -> None:
        members: list[BaseException] = [*cancels, error]
        random.shuffle(members)  # type: ignore[attr-defined]
        assert lone_error(group(members), beside=trio.Cancelled) is error
        assert raised_by(group(members), beside=trio.Cancelled) is error

    @given(st.lists(st.sampled_from(CANCELLED), min_size=1, max_size=4))
    def test_cancels_alone_stay_the_group_trio_handles(self, cancels: list[trio.Cancelled]) -> None:
        only_cancels = group(cancels)
        assert lone_error(only_cancels, beside=trio.Cancelled) is None
        assert raised_by(only_cancels, beside=trio.Cancelled) is only_cancels

    @given(st.lists(errors, min_size=2, max_size=4), st.lists(st.sampled_from(CANCELLED)))
    def test_several_errors_stay_the_group(
        self, several: list[BaseException], cancels: list[trio.Cancelled]
    ) -> None:
        whole = group([*several, *cancels])
        assert lone_error(whole, beside=trio.Cancelled) is None
        assert raised_by(whole, beside=trio.Cancelled) is whole

    @given(trees(leaf_exceptions))
    def test_without_beside_a_lone_cancel_counts(self, body: BaseException) -> None:
        """With nothing set aside, a lone member is returned whatever it is."""
        assert lone_error(group([body])) is body


async def test_a_real_nursery_hidden_in_a_context_manager() -> None:
    """The shape of ``open_sqlite_storage``: a body's error leaves trio's
    nursery as itself; two tasks' errors leave as the group."""

    async def hidden_nursery(task_fails: bool) -> None:
        async def task() -> None:
            if task_fails:
                raise OSError("task")
            await trio.sleep_forever()

        with raise_lone_error():
            async with trio.open_nursery() as nursery:
                nursery.start_soon(task)
                await trio.lowlevel.checkpoint()
                raise ValueError("body")

    with pytest.raises(ValueError, match=r"^body$"):
        await hidden_nursery(task_fails=False)
    with pytest.RaisesGroup(ValueError, OSError):
        await hidden_nursery(task_fails=True)
