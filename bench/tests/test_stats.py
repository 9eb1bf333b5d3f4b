import math

import pytest
from scipy import stats as sps

from memofs_bench import stats as st


def test_means_hand_computed():
    assert st.amean([1, 2, 4]) == pytest.approx(7 / 3)
    # 3 / (1 + 1/2 + 1/4) = 12/7
    assert st.hmean([1, 2, 4]) == pytest.approx(12 / 7)
    assert st.hmean([2000, 1800, 2200]) == pytest.approx(1986.6221, abs=1e-4)
    assert st.median([5, 1, 3, 2]) == 2.5
    assert st.STATISTICS["Min"]([3, 1, 2]) == 1
    assert st.STATISTICS["Max"]([3, 1, 2]) == 3


def test_hmean_nonpositive_is_zero():
    assert st.hmean([1.0, 0.0]) == 0.0


def test_stddev_is_sample_stddev():
    # sum of squared deviations from 5 is 32; n - 1 = 7
    assert st.stddev([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(math.sqrt(32 / 7))
    assert st.stddev([3.0]) == 0.0
    assert st.coeffvar([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(100 * math.sqrt(32 / 7) / 5)


def test_empty_samples_rejected():
    with pytest.raises(ValueError):
        st.amean([])


def test_welch_hand_computed():
    # means 2 and 5, variances 1 and 1, n = 3: se^2 = 2/3, t = -3 / sqrt(2/3), df = 4
    r = st.welch_ttest([1, 2, 3], [4, 5, 6])
    assert r.t == pytest.approx(-3 / math.sqrt(2 / 3))
    assert r.df == pytest.approx(4.0)
    assert r.p == pytest.approx(2 * sps.t.sf(3 / math.sqrt(2 / 3), 4))
    assert r.p == pytest.approx(0.02131, abs=1e-4)
    assert r.significant


@pytest.mark.parametrize("a,b", [
    ([0.4807, 0.47, 0.49, 0.485], [0.4623, 0.46, 0.47]),
    ([8.8, 8.9, 8.92, 8.7, 9.1], [6.8, 6.9, 6.8, 7.3]),
    ([1.0, 2.0, 3.0, 4.0, 10.0], [2.0, 2.5, 2.6]),
    ([100.0, 101.0], [100.5, 99.0, 102.0, 101.5, 100.0, 98.0]),
])
def test_welch_matches_scipy(a, b):
    ours = st.welch_ttest(a, b)
    ref = sps.ttest_ind(a, b, equal_var=False)
    assert ours.t == pytest.approx(ref.statistic)
    assert ours.p == pytest.approx(ref.pvalue)


def test_welch_degenerate():
    assert st.welch_ttest([1.0], [1.0, 2.0]) is None
    assert st.welch_ttest([1.0, 1.0], [1.0, 1.0]).p == 1.0
    assert st.welch_ttest([1.0, 1.0], [2.0, 2.0]).significant


def test_hmean_rows_test_reciprocals():
    a, b = [1000.0, 1100.0, 900.0], [2000.0, 1800.0, 2200.0]
    ref = sps.ttest_ind([1 / x for x in a], [1 / x for x in b], equal_var=False)
    assert st.significance("Hmean", a, b).p == pytest.approx(ref.pvalue)
    assert st.significance("Amean", a, b).p == pytest.approx(
        sps.ttest_ind(a, b, equal_var=False).pvalue)
    assert st.significance("Min", a, b) is None
    assert st.significance("Stddev", a, b) is None


def test_pct_better_sign():
    assert st.pct_better(10.0, 8.0, higher_better=False) == pytest.approx(20.0)
    assert st.pct_better(10.0, 8.0, higher_better=True) == pytest.approx(-20.0)
    assert st.pct_better(8.8727, 6.8353, higher_better=False) == pytest.approx(22.96, abs=0.01)
    assert st.pct_better(4096.0, 3891.2, higher_better=True) == pytest.approx(-5.0)
    assert st.pct_better(0.0, 0.0, True) == 0.0
    assert st.pct_better(0.0, 1.0, True) == math.inf
