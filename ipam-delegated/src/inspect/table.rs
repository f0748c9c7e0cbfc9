//! Column-aligned text for people: a header row, then one row per item.

/// How a column's cells line up; numbers read best right-aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

pub struct Table {
    columns: Vec<(&'static str, Align)>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(columns: &[(&'static str, Align)]) -> Self {
        Table { columns: columns.to_vec(), rows: Vec::new() }
    }

    /// Adds a row; missing cells are blank, extra ones are ignored.
    pub fn push(&mut self, row: Vec<String>) {
        self.rows.push(row);
    }

    /// The header and the rows, columns two spaces apart, no trailing blanks.
    pub fn render(&self) -> String {
        let cell = |row: &[String], i: usize| row.get(i).map_or("", String::as_str).to_string();
        let header: Vec<String> = self.columns.iter().map(|(name, _)| name.to_string()).collect();
        let lines: Vec<Vec<String>> = std::iter::once(header)
            .chain(self.rows.iter().map(|row| (0..self.columns.len()).map(|i| cell(row, i)).collect()))
            .collect();
        let widths: Vec<usize> = (0..self.columns.len())
            .map(|i| lines.iter().map(|line| line[i].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = String::new();
        for line in &lines {
            let cells: Vec<String> = line
                .iter()
                .zip(&self.columns)
                .zip(&widths)
                .map(|((text, (_, align)), &width)| match align {
                    Align::Left => format!("{text:<width$}"),
                    Align::Right => format!("{text:>width$}"),
                })
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_and_lines_have_no_trailing_blanks() {
        let mut t = Table::new(&[("NAME", Align::Left), ("SIZE", Align::Right), ("NOTE", Align::Left)]);
        t.push(vec!["blue".into(), "254".into(), String::new()]);
        t.push(vec!["b".into(), "65534".into(), "ok".into()]);
        assert_eq!(t.render(), "NAME   SIZE  NOTE\nblue    254\nb     65534  ok\n");
    }
}
