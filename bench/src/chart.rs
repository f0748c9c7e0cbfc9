//! A hand-written SVG line chart: ADD latency against pool fill, log scale.

use std::fmt::Write as _;

use crate::figures::Figures;

const W: f64 = 760.0;
const H: f64 = 440.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 30.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 70.0;
const COLORS: [&str; 4] = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd"];

pub fn render(fig: &Figures) -> String {
    let values: Vec<f64> =
        fig.fill_curve.iter().flat_map(|(_, c)| c.iter().map(|p| p.1.median_ms)).filter(|v| *v > 0.0).collect();
    let lo = values.iter().copied().fold(f64::INFINITY, f64::min).max(1e-3);
    let hi = values.iter().copied().fold(0.0, f64::max).max(lo * 10.0);
    let (dec_lo, dec_hi) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let levels = fig.fill_levels();
    let x = |i: usize| LEFT + plot_w * (i as f64 + 0.5) / levels.len() as f64;
    let y = |ms: f64| TOP + plot_h * (1.0 - (ms.max(1e-3).log10() - dec_lo as f64) / (dec_hi - dec_lo) as f64);

    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(s, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{}" y="24" text-anchor="middle" font-size="15">ADD latency against pool fill (10.23.0.0/16, median, log scale)</text>"#,
        W / 2.0
    );
    for d in dec_lo..=dec_hi {
        let yy = y(10f64.powi(d));
        let label = 10f64.powi(d);
        let _ = writeln!(s, r##"<line x1="{LEFT}" y1="{yy:.1}" x2="{:.1}" y2="{yy:.1}" stroke="#ddd"/>"##, W - RIGHT);
        let _ = writeln!(s, r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{label} ms</text>"#, LEFT - 6.0, yy + 4.0);
    }
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="#333"/><line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#333"/>"##,
        H - BOTTOM,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM
    );
    for (i, level) in levels.iter().enumerate() {
        let _ = writeln!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}%</text>"#,
            x(i),
            H - BOTTOM + 18.0,
            level * 100.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">pool fill</text>"#,
        LEFT + plot_w / 2.0,
        H - 20.0
    );
    for (k, (name, curve)) in fig.fill_curve.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let points: Vec<String> =
            curve.iter().enumerate().map(|(i, p)| format!("{:.1},{:.1}", x(i), y(p.1.median_ms))).collect();
        let _ =
            writeln!(s, r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>"#, points.join(" "));
        for (i, p) in curve.iter().enumerate() {
            let _ = writeln!(
                s,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{color}"><title>{name}: {:.2} ms at {}%</title></circle>"#,
                x(i),
                y(p.1.median_ms),
                p.1.median_ms,
                p.0 * 100.0
            );
        }
        let ly = TOP + 8.0 + 18.0 * k as f64;
        let _ = writeln!(
            s,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{name}</text>"#,
            LEFT + 14.0,
            LEFT + 40.0,
            LEFT + 46.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>\n");
    s
}
