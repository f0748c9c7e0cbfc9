//! Pools with many leases (suite only).

use std::fmt::Write as _;

use crate::figures::Figures;
use crate::setup::Counts;

pub fn section(fig: &Figures, c: &Counts) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\n## Pools with {} leases (suite only)\n\nFilled through the library; the cursor sits on the first lease, so the next free address lies behind the whole run.\n", c.big_fill);
    let _ = writeln!(s, "| pool | ADDs | median ms | p99 ms | max ms | fill time |\n|---|---:|---:|---:|---:|---:|");
    for (name, st, fill) in &fig.big {
        let _ = writeln!(
            s,
            "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.1} s |",
            st.n,
            st.median_ms,
            st.p99_ms,
            st.max_ms,
            fill.as_secs_f64()
        );
    }
    s
}
