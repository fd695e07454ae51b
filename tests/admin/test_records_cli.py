"""``tether records`` (admin.records_cli), pure: rows, the table, one record in detail (keys
and sizes, never values unless asked), argument checks, the bounded collection."""

from __future__ import annotations

import argparse
import base64
import datetime
from typing import Any

import pytest

from admin import records_cli as rc
from admin import recordsview as view
from tether.base import config
from tether.kube import apitypes
from tether.wire import watches, watchkinds

NOW = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.UTC)
SECRET = "s3cr3t-value-never-shown"


def stored(
    name: str = "app",
    *,
    ns: str = "team-a",
    watch: str = "configuration",
    deleted: bool = False,
    epoch: int = 2,
    source: str = "webhook",
    kcp_ns: str = "kcp-system",
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "tether.kyma-project.io/v1",
        "kind": "RuntimeConfigMap",
        "metadata": {
            "name": f"rcm-{name}",
            "namespace": kcp_ns,
            "resourceVersion": "981",
            "creationTimestamp": "2026-12-02T12:00:00Z",
            "labels": {
                apitypes.RUNTIME_ID_LABEL: "rt-1",
                watches.WATCH_LABEL: watch,
                apitypes.KYMA_NAME_LABEL: "kyma-1",
            },
            "ownerReferences": [{"kind": "Kyma", "name": "kyma-1"}],
        },
        "spec": {
            "runtimeId": "rt-1",
            "watch": watch,
            "namespace": ns,
            "name": name,
            "uid": "u-1",
            "resourceVersion": "77",
            "observedAt": "2026-12-04T11:57:00Z",
            "deleted": deleted,
            "source": source,
            "epoch": epoch,
            "labels": {"app": "x"},
            "annotations": {},
            "data": {},
            **spec,
        },
    }


def test_rows_and_the_table_show_watch_key_state_epoch_source_and_ages() -> None:
    rows = [
        view.row_of(stored()),
        view.row_of(stored("gone", deleted=True, source="poller", kcp_ns="cfg-store", data={})),
    ]
    assert rows[0] == view.Row(
        "configuration",
        "team-a",
        "app",
        False,
        2,
        "webhook",
        "2026-12-04T11:57:00Z",
        "kcp-system",
        "2026-12-02T12:00:00Z",
        "kyma-1",
    )
    cells = view.table(rows, NOW)
    assert cells[0] == [
        "configuration",
        "team-a/app",
        "live",
        "2",
        "webhook",
        "3m ago",
        "kcp-system",
        "2d",
    ]
    assert cells[1][2:4] == ["tombstone", "2"] and cells[1][4] == "poller"
    assert cells[1][6] == "cfg-store"


def test_a_hand_written_or_hostile_object_never_raises_and_prints_on_one_line() -> None:
    odd = {"metadata": "nope", "spec": ["not", "a", "map"]}
    assert view.row_of(odd) == view.Row("", "", "", False, 0, "", "", "", "", "")
    assert view.table([view.row_of(odd)], NOW)[0][:3] == ["(legacy)", "/", "live"]
    evil = stored("a\nb", observedAt="not a time", epoch=True, source="x\x1b[31m")
    cells = view.table([view.row_of(evil)], NOW)[0]
    assert cells[1] == "team-a/a?b" and cells[3] == "0" and "\x1b" not in cells[4]
    assert cells[5] == "not a time"
    view.detail_lines(evil, NOW, show_values=True)  # renders without raising


def test_the_detail_shows_keys_and_sizes_never_values_unless_asked() -> None:
    blob = base64.b64encode(b"\x00" * 1000).decode()
    obj = stored(
        data={"config.yaml": SECRET, "b": "xy"},
        binaryData={"blob": blob},
        annotations={watchkinds.LAST_APPLIED: '{"data":{"k":"' + SECRET + '"}}', "team": "a"},
    )
    text = "\n".join(view.detail_lines(obj, NOW, show_values=False))
    assert SECRET not in text
    assert "Values: 3 keys" in text and "--show-values" in text
    assert "config.yaml" in text and f"{len(SECRET)} B" in text
    assert "1000 B" in text  # binaryData: the decoded size
    assert "team=a" in text and "Kyma CR:     kyma-1; owners: Kyma/kyma-1" in text
    assert "Epoch:       2" in text and "Source:      webhook" in text
    shown = "\n".join(view.detail_lines(obj, NOW, show_values=True))
    assert SECRET in shown


def test_the_detail_as_json_leaves_out_values_unless_asked() -> None:
    obj = stored(data={"k": SECRET}, annotations={watchkinds.LAST_APPLIED: SECRET})
    doc = view.detail_json(obj, show_values=False)
    assert SECRET not in repr(doc)
    assert doc["keys"] == [{"field": "data", "key": "k", "size": len(SECRET)}]
    assert doc["state"] == "live" and doc["kyma"] == "kyma-1" and doc["kcpName"] == "rcm-app"
    assert view.detail_json(obj, show_values=True)["record"]["data"] == {"k": SECRET}
    assert obj["spec"]["data"] == {"k": SECRET}  # the object itself is not changed


def test_value_sizes() -> None:
    assert view.value_size("data", "é") == 2
    assert view.value_size("binaryData", base64.b64encode(b"abcd").decode()) == 4
    assert view.value_size("binaryData", base64.b64encode(b"abcde").decode()) == 5
    assert view.keys_of({"data": {"b": "1", "a": "22"}, "binaryData": None}) == [
        ("data", "a", 2),
        ("data", "b", 1),
    ]


def _args(*argv: str) -> argparse.Namespace:
    return rc.parser().parse_args(list(argv))


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (("rt 1",), "RUNTIME"),
        (("rt-",), "RUNTIME"),
        (("rt-1", "noslash"), "NAMESPACE/NAME"),
        (("rt-1", "Team_A!/x"), "NAMESPACE/NAME"),
        (("rt-1", "a/b\nc"), "NAMESPACE/NAME"),
        (("rt-1", "--watch", "a,b=c"), "--watch"),
        (("rt-1", "--limit", "0"), "--limit"),
        (("rt-1", "--limit", "10001"), "--limit"),
    ],
)
def test_bad_arguments_are_named_before_the_kcp_is_asked(argv: tuple[str, ...], named: str) -> None:
    with pytest.raises(config.SettingError, match=f"^{named}"):
        rc.check_args(_args(*argv))


def test_good_arguments_and_the_selector() -> None:
    assert rc.check_args(_args("rt-1")) is None
    assert rc.check_args(_args("rt-1", "team-a/app.config")) == ("team-a", "app.config")
    assert rc.selector("rt-1", None, None) == "kyma-project.io/runtime-id=rt-1"
    assert rc.selector("rt-1", "w", "team-a") == (
        "kyma-project.io/runtime-id=rt-1,tether.kyma-project.io/watch=w,"
        "tether.kyma-project.io/namespace=team-a"
    )


def test_main_answers_a_usage_error_with_exit_2_and_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert rc.main(["rt 1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("tether records: RUNTIME:") and err.count("\n") == 1


def test_collection_keeps_at_most_the_limit_and_counts_the_rest() -> None:
    objs = [stored(f"o{i}", watch="w" if i % 2 else "a") for i in range(7)]
    rows, objects, total = rc._collect(iter(objs), 3, None)
    assert total == 7 and len(rows) == 3 and objects == []
    assert [r.watch for r in rows] == sorted(r.watch for r in rows)
    rows, objects, total = rc._collect(iter(objs), 3, "o4")
    assert total == 1 and [o["spec"]["name"] for o in objects] == ["o4"]


def test_a_record_outside_its_watchs_storage_namespace_is_stray() -> None:
    homes = {"configuration": "tether-configuration", "local": "kcp-system"}
    row = view.row_of(stored(kcp_ns="tether-configuration"))
    assert not rc.stray(row, homes, "kcp-system")
    assert rc.stray(row._replace(kcp_namespace="kcp-system"), homes, "kcp-system")
    assert rc.stray(row._replace(watch="local"), homes, "kcp-system")
    assert not rc.stray(row._replace(watch="", kcp_namespace="kcp-system"), homes, "kcp-system")
    assert rc.stray(row._replace(watch=""), homes, "kcp-system")  # legacy: the listener's
    assert not rc.stray(row._replace(watch="unknown"), homes, "kcp-system")  # deleted Watch
    assert not rc.stray(row._replace(kcp_namespace="x"), None, "kcp-system")  # not read
    marked = view.table([row._replace(stray=True)], NOW)[0]
    assert (
        marked[6] == "tether-configuration (stray)"
        and view.row_json(row._replace(stray=True))["stray"] is True
    )
