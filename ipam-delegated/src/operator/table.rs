//! Column-aligned text for people: a header row, then one row per item.

use std::borrow::Cow;

/// How a column's cells line up; numbers read best right-aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// The widest a cell is shown; a container id (64 characters) fits. Longer
/// text is cut with `…`, so that no name can make a table unreadable (or
/// wider than the formatter can pad: 65,535).
const MAX_CELL: usize = 72;

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
        let cell = |row: &[String], i: usize| cut(&printable(row.get(i).map_or("", String::as_str)));
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

/// A line feed in a name (a network name may hold one) would break the row
/// in two: control characters are shown escaped, as `\n`.
fn printable(text: &str) -> Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(
        text.chars().map(|c| if c.is_control() { c.escape_default().to_string() } else { c.to_string() }).collect(),
    )
}

/// `text`, or its first `MAX_CELL - 1` characters and `…`.
fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_CELL - 1) {
        Some((end, _)) if text.chars().count() > MAX_CELL => format!("{}…", &text[..end]),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_cells_are_cut_with_an_ellipsis() {
        let mut t = Table::new(&[("NAME", Align::Left), ("N", Align::Right)]);
        let long = "é".repeat(70_000);
        t.push(vec![long, "1".into()]);
        t.push(vec!["x".repeat(MAX_CELL), "2".into()]);
        let lines: Vec<String> = t.render().lines().map(String::from).collect();
        assert_eq!(lines[1], format!("{}…  1", "é".repeat(MAX_CELL - 1)));
        assert_eq!(lines[2], format!("{}  2", "x".repeat(MAX_CELL)));
    }

    #[test]
    fn control_characters_are_escaped() {
        let mut t = Table::new(&[("NAME", Align::Left), ("N", Align::Right)]);
        t.push(vec!["a\nb\tc\u{1b}".into(), "1".into()]);
        assert_eq!(t.render(), "NAME           N\na\\nb\\tc\\u{1b}  1\n");
    }

    #[test]
    fn columns_are_aligned_and_lines_have_no_trailing_blanks() {
        let mut t = Table::new(&[("NAME", Align::Left), ("SIZE", Align::Right), ("NOTE", Align::Left)]);
        t.push(vec!["blue".into(), "254".into(), String::new()]);
        t.push(vec!["b".into(), "65534".into(), "ok".into()]);
        assert_eq!(t.render(), "NAME   SIZE  NOTE\nblue    254\nb     65534  ok\n");
    }
}
