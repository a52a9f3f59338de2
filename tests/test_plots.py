"""The measurement-vs-ceiling figures: the lines sit where the numbers say, axes carry
units, series differ in more than colour, and bad input is refused by name."""

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from gpuinfer.course import plots


def _reads():
    # Two sweeps as bench.weight_read_bandwidth returns them (sizes in bytes).
    sizes = [2**20, 2**24, 2**28]
    return pd.DataFrame(
        [{"bytes": s, "achieved_gb_per_s": gbs, "flush_cache": True}
         for s, gbs in zip(sizes, [100.0, 250.0, 280.0])]
        + [{"bytes": s, "achieved_gb_per_s": gbs, "flush_cache": False}
           for s, gbs in zip(sizes, [900.0, 600.0, 281.0])])


def _lines(ax):
    return [ln for ln in ax.get_lines()]


def test_bandwidth_vs_size_places_peak_and_cache_where_given():
    ax = plots.bandwidth_vs_size(_reads(), bandwidth_bytes_per_s=320e9, cache_bytes=4 * 2**20)
    assert ax.get_xscale() == "log"
    assert "bytes" in ax.get_xlabel() and "GB/s" in ax.get_ylabel()
    lines = _lines(ax)
    # Two measured series, one horizontal peak line (320 GB/s), one vertical cache line.
    horizontal = [ln for ln in lines if len(set(ln.get_ydata())) == 1 and len(set(ln.get_xdata())) == 2]
    vertical = [ln for ln in lines if len(set(ln.get_xdata())) == 1 and len(set(ln.get_ydata())) == 2]
    assert [h.get_ydata()[0] for h in horizontal] == [pytest.approx(320.0)]
    assert [v.get_xdata()[0] for v in vertical] == [pytest.approx(4 * 2**20)]
    measured = [ln for ln in lines if len(ln.get_xdata()) == 3]
    assert len(measured) == 2
    # The flushed (honest) series is drawn first, solid; the cached one differs in
    # marker and dash too, not only in colour.
    flushed, cached = measured
    assert list(flushed.get_ydata()) == [100.0, 250.0, 280.0]
    assert flushed.get_marker() != cached.get_marker()
    assert flushed.get_linestyle() != cached.get_linestyle()
    ticks = [plots.bytes_label(t) for t in ax.get_xticks()]
    assert "1 MiB" in ticks and "256 MiB" in ticks
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("320 GB/s" in t for t in labels) and any("4 MiB" in t for t in labels)
    plt.close("all")


def test_bandwidth_vs_size_sorts_by_size_and_works_without_flush_column():
    df = pd.DataFrame({"bytes": [2**24, 2**20], "achieved_gb_per_s": [20.0, 10.0]})
    ax = plots.bandwidth_vs_size(df)
    (line,) = _lines(ax)
    assert list(line.get_xdata()) == [2**20, 2**24]
    plt.close("all")


def test_step_time_vs_batch_draws_the_floor_in_milliseconds():
    rows = [{"batch": b, "seconds": 0.010 + 0.0001 * b, "cuda_graph": False} for b in (1, 4, 16)]
    ax = plots.step_time_vs_batch(rows, floor_s=0.00875)
    assert ax.get_xscale() == "log" and "ms" in ax.get_ylabel()
    measured, floor = _lines(ax)
    assert list(measured.get_xdata()) == [1, 4, 16]
    assert measured.get_ydata()[0] == pytest.approx(10.1)  # 0.0101 s -> 10.1 ms
    assert floor.get_ydata()[0] == pytest.approx(8.75)
    plt.close("all")


def test_bytes_label_uses_binary_prefixes():
    assert plots.bytes_label(65536) == "64 KiB"
    assert plots.bytes_label(2**20) == "1 MiB"
    assert plots.bytes_label(3 * 2**30) == "3 GiB"
    assert plots.bytes_label(512) == "512 B"
    assert plots.bytes_label(4 * 2**20 - 4096) == "4 MiB"  # 3.996 MiB, to 3 figures


def test_bad_input_is_refused_by_name():
    with pytest.raises(ValueError, match="achieved_gb_per_s"):
        plots.bandwidth_vs_size(pd.DataFrame({"bytes": [1.0]}))
    with pytest.raises(ValueError, match="no rows"):
        plots.bandwidth_vs_size(pd.DataFrame())
    with pytest.raises(ValueError, match="bandwidth_bytes_per_s"):
        plots.bandwidth_vs_size(_reads(), bandwidth_bytes_per_s=-1)
    with pytest.raises(ValueError, match="cache_bytes"):
        plots.bandwidth_vs_size(_reads(), cache_bytes=float("nan"))
    with pytest.raises(ValueError, match="floor_s"):
        plots.step_time_vs_batch([{"batch": 1, "seconds": 1e-3}], floor_s=0)
    with pytest.raises(ValueError, match="seconds"):
        plots.step_time_vs_batch([{"batch": 1}])
    plt.close("all")


def test_room_fractions_plots_each_row_as_a_percentage():
    import matplotlib

    matplotlib.use("Agg")
    from gpuinfer.measure import reference

    sheet = pd.DataFrame({"lab": [1, 1, 3], "catalogue_entry": ["T4", "L4", "T4"],
                          "fraction_of_ceiling": [0.7, 0.8, None]})
    ax = plots.room_fractions(sheet)
    points = sorted(tuple(p) for c in ax.collections for p in c.get_offsets())
    assert points == [(1.0, 70.0), (1.0, 80.0)]          # the row without a fraction left out
    assert ax.get_ylabel() == "% of the ceiling reached"
    with pytest.raises(ValueError, match="fraction_of_ceiling"):
        plots.room_fractions(pd.DataFrame({"lab": [1], "catalogue_entry": ["T4"]}))
    plots.room_fractions(reference.reference_rows())      # the shipped rows draw
