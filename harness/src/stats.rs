//! The benchmarks' summaries of rounds: the median, and how far the median
//! of per-round ratios is settled (one home for the benches in `benches/`).

/// The median (the mean of the middle two for an even count; NaN for none).
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

/// The fewest rounds for which a report gives [`bootstrap_median`]'s
/// interval (fewer resample into too few distinct medians to say much).
pub const INTERVAL_ROUNDS: usize = 8;

/// The median, min and max of `r` (`None` when empty).
pub fn spread(r: Vec<f64>) -> Option<(f64, f64, f64)> {
    if r.is_empty() {
        return None;
    }
    let (lo, hi) = r.iter().fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
    Some((median(r), lo, hi))
}

/// A 95% interval of the median of `r`: the 2.5th and 97.5th percentiles
/// of the median of `r` resampled with replacement 2,000 times (a fixed
/// xorshift seed: the same input gives the same interval). NaN for none.
pub fn bootstrap_median(r: &[f64]) -> (f64, f64) {
    if r.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut meds: Vec<f64> =
        (0..2000).map(|_| median((0..r.len()).map(|_| r[(next() % r.len() as u64) as usize]).collect())).collect();
    meds.sort_by(f64::total_cmp);
    (meds[50], meds[1949])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_odd_even_and_no_values() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(Vec::new()).is_nan());
    }

    #[test]
    fn the_spread_is_the_median_min_and_max() {
        assert_eq!(spread(vec![3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(spread(Vec::new()), None);
    }

    #[test]
    fn the_interval_holds_the_median_and_narrows_with_agreeing_rounds() {
        let wide: Vec<f64> = (0..16).map(|i| 0.5 + i as f64 / 10.0).collect();
        let (lo, hi) = bootstrap_median(&wide);
        assert!(lo <= median(wide.clone()) && median(wide) <= hi && lo < hi);
        assert_eq!(bootstrap_median(&[1.0; 16]), (1.0, 1.0));
        assert_eq!(bootstrap_median(&[2.0, 4.0, 1.0]), bootstrap_median(&[2.0, 4.0, 1.0]), "repeatable");
    }
}
