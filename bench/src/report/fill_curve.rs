//! ADD latency against pool fill: the table under the chart (chart.rs).

use std::fmt::Write as _;

use super::format::ratio;
use crate::figures::Figures;

pub fn section(fig: &Figures) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## ADD latency against pool fill\n\n![ADD latency against fill](benchmarks/add-latency-vs-fill.svg)\n\n10.23.0.0/16 filled from its start to each level, the cursor on the last lease (as sequential allocation leaves a pool). Median of the trials at each level (each ADD is undone by a DEL and the cursor reset).\n");
    let _ = write!(s, "| fill |");
    for (name, _) in &fig.fill_curve {
        let _ = write!(s, " {name} (ms) |");
    }
    let _ = write!(s, " ratio |\n|---:|");
    for _ in &fig.fill_curve {
        s.push_str("---:|");
    }
    s.push_str("---:|\n");
    for (i, level) in fig.fill_levels().iter().enumerate() {
        let _ = write!(s, "| {}% |", level * 100.0);
        let vals: Vec<f64> =
            fig.fill_curve.iter().map(|(_, curve)| curve.get(i).map_or(0.0, |p| p.1.median_ms)).collect();
        for v in &vals {
            let _ = write!(s, " {v:.2} |");
        }
        let _ = writeln!(s, " {} |", if vals.len() == 2 { ratio(vals[0], vals[1]) } else { "—".into() });
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::Stats;

    #[test]
    fn a_row_per_level_measured_with_each_variants_median_and_their_ratio() {
        let at = |points: &[(f64, f64)]| {
            points.iter().map(|&(level, median_ms)| (level, Stats { median_ms, ..Default::default() })).collect()
        };
        let fig = Figures {
            fill_curve: vec![
                ("suite: ipam-delegated".into(), at(&[(0.0, 1.5), (0.9999, 2.0)])),
                ("host-local".into(), at(&[(0.0, 3.0), (0.9999, 400.0)])),
            ],
            ..Default::default()
        };
        let s = section(&fig);
        assert!(
            s.contains("| fill | suite: ipam-delegated (ms) | host-local (ms) | ratio |\n|---:|---:|---:|---:|\n"),
            "{s}"
        );
        assert!(
            s.contains("| 0% | 1.50 | 3.00 | 0.50× |\n| 99.99% | 2.00 | 400.00 | 0.0050× (200× faster) |\n"),
            "{s}"
        );
    }
}
