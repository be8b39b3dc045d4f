//! Latency statistics as perftest reports them: what `ping` and `bench`
//! print and put in their JSON.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latency statistics in microseconds, as perftest's latency tests report
/// them (its JSON keys): `t_typical` is the median, the percentiles
/// nearest-rank.
#[derive(Serialize, Debug, PartialEq)]
pub struct Latency {
    #[serde(skip)]
    pub n: usize,
    pub t_min: f64,
    pub t_max: f64,
    pub t_typical: f64,
    pub t_avg: f64,
    /// The population standard deviation.
    pub t_stdev: f64,
    pub percentile_99: f64,
    #[serde(rename = "percentile_99.9")]
    pub percentile_99_9: f64,
}

impl Latency {
    /// The statistics of `samples`; `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Latency> {
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let n = v.len();
        let (&t_min, &t_max) = (v.first()?, v.last()?);
        let t_typical = if n % 2 == 1 { v[n / 2] } else { (v[n / 2 - 1] + v[n / 2]) / 2.0 };
        let t_avg = v.iter().sum::<f64>() / n as f64;
        let t_stdev = (v.iter().map(|x| (x - t_avg).powi(2)).sum::<f64>() / n as f64).sqrt();
        let rank = |p: f64| v[((p * n as f64).ceil() as usize).clamp(1, n) - 1];
        Some(Latency {
            n,
            t_min,
            t_max,
            t_typical,
            t_avg,
            t_stdev,
            percentile_99: rank(0.99),
            percentile_99_9: rank(0.999),
        })
    }
}

impl Latency {
    /// The statistics of a histogram of nanoseconds (`rpma bench`'s, which
    /// keeps every operation's latency within 0.1 %).
    pub fn of_histogram(h: &Histogram<u64>) -> Latency {
        let us = |ns: f64| ns / 1e3;
        Latency {
            n: h.len() as usize,
            t_min: us(h.min() as f64),
            t_max: us(h.max() as f64),
            t_typical: us(h.value_at_quantile(0.5) as f64),
            t_avg: us(h.mean()),
            t_stdev: us(h.stdev()),
            percentile_99: us(h.value_at_quantile(0.99) as f64),
            percentile_99_9: us(h.value_at_quantile(0.999) as f64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_of_round_trips() {
        assert_eq!(Latency::of(&[]), None);
        let one = Latency::of(&[5.0]).unwrap();
        assert_eq!((one.t_min, one.t_max, one.t_typical, one.t_avg, one.t_stdev), (5.0, 5.0, 5.0, 5.0, 0.0));
        assert_eq!((one.percentile_99, one.percentile_99_9), (5.0, 5.0));
        // Unsorted; an even count's median is the middle two's mean.
        let s = Latency::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!((s.n, s.t_min, s.t_max, s.t_typical, s.t_avg), (4, 1.0, 4.0, 2.5, 2.5));
        assert!((s.t_stdev - 1.25f64.sqrt()).abs() < 1e-12);
        assert_eq!((s.percentile_99, s.percentile_99_9), (4.0, 4.0));
        // 1..=1000: nearest rank.
        let v: Vec<f64> = (1..=1000).rev().map(f64::from).collect();
        let s = Latency::of(&v).unwrap();
        assert_eq!((s.t_typical, s.percentile_99, s.percentile_99_9), (500.5, 990.0, 999.0));
        let json = serde_json::to_value(&s).unwrap();
        for k in ["t_min", "t_max", "t_typical", "t_avg", "t_stdev", "percentile_99", "percentile_99.9"] {
            assert!(json[k].is_f64(), "{k}: {json}");
        }
        assert!(json.get("n").is_none());
    }

    #[test]
    fn a_histogram_gives_the_same_keys() {
        let mut h = Histogram::<u64>::new(3).unwrap();
        for ns in [10_000u64, 20_000, 30_000] {
            h.record(ns).unwrap();
        }
        let l = Latency::of_histogram(&h);
        // Within the histogram's 0.1 %.
        let near = |x: f64, want: f64| (x - want).abs() <= want * 1e-3;
        assert_eq!(l.n, 3);
        assert!(near(l.t_min, 10.0) && near(l.t_typical, 20.0) && near(l.t_max, 30.0) && near(l.t_avg, 20.0), "{l:?}");
    }
}
