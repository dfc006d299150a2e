"""``xdist_group`` works under pytest 9.2 (tests/conftest.py,
``pytest_collection_modifyitems_keep_xdist_groups``): a grouped test's id carries the
``@group`` suffix that ``--dist loadgroup`` schedules by, so a group runs on one worker and
a module-shared server starts once.
"""

from __future__ import annotations

import pytest

from conftest import pytest_collection_modifyitems_keep_xdist_groups

pytestmark = pytest.mark.xdist_group("xdist_groups_check")


def test_a_grouped_test_carries_its_group_in_the_id_the_scheduler_reads(
    request: pytest.FixtureRequest,
) -> None:
    if not getattr(request.config.option, "loadgroup", False):  # set in a loadgroup worker
        pytest.skip("only in an xdist worker of `--dist loadgroup` (the README's command)")
    assert request.node.nodeid.endswith("@xdist_groups_check"), request.node.nodeid


def test_the_id_xdist_assigns_becomes_the_items_id(request: pytest.FixtureRequest) -> None:
    # what xdist 3.8 does to a grouped item in a loadgroup worker, then the conftest's hook
    item = request.node
    saved = item.nodeid
    try:
        item._nodeid = f"{saved}@g"
        pytest_collection_modifyitems_keep_xdist_groups([item])
        assert item.nodeid == f"{saved}@g"
    finally:
        _restore(item, saved)


def _restore(item: pytest.Item, nodeid: str) -> None:
    """The item's own id back, before pytest reports it."""
    if not hasattr(item, "_id"):  # before pytest 9.2 ``_nodeid`` is the id itself
        item._nodeid = nodeid  # type: ignore[attr-defined]
        return
    vars(item).pop("_nodeid", None)
    from _pytest.nodeid import coerce_node_id

    item._id = coerce_node_id(nodeid)
