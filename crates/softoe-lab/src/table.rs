//! The one table renderer every table of the lab and of the command-line
//! tool prints with: a header, rows of cells, each column aligned left or
//! right and as wide as its widest cell, an optional title above and notes
//! below. Plain text, no borders, lines trimmed at the end.
//!
//! ```
//! use softoe_lab::table::Table;
//! let mut t = Table::new().left("system").right("Gb/s");
//! t.row(["softoe", "9.41"]);
//! t.row(["Linux", "12.02"]);
//! assert_eq!(t.render(), "system  Gb/s\nsoftoe  9.41\nLinux  12.02\n");
//! ```

use std::fmt;

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    Left,
    Right,
}

/// One line of the body: cells under the columns, and text after them
/// that no column is sized for.
#[derive(Debug, Clone)]
struct Row {
    cells: Vec<String>,
    tail: String,
}

/// A table being built; [`Table::render`] (or `Display`) lays it out.
#[derive(Debug, Clone)]
pub struct Table {
    title: Option<String>,
    head: Vec<String>,
    align: Vec<Align>,
    rows: Vec<Row>,
    notes: Vec<String>,
    indent: String,
    gap: String,
    rule: bool,
}

impl Default for Table {
    fn default() -> Self {
        Table::new()
    }
}

impl Table {
    /// An empty table: no columns, cells one space apart.
    pub fn new() -> Table {
        Table {
            title: None,
            head: Vec::new(),
            align: Vec::new(),
            rows: Vec::new(),
            notes: Vec::new(),
            indent: String::new(),
            gap: " ".to_string(),
            rule: false,
        }
    }

    /// Adds a column whose cells line up on the left.
    #[must_use]
    pub fn left(self, head: &str) -> Table {
        self.column(head, Align::Left)
    }

    /// Adds a column whose cells line up on the right (numbers).
    #[must_use]
    pub fn right(self, head: &str) -> Table {
        self.column(head, Align::Right)
    }

    /// Adds right-aligned columns, one per head.
    #[must_use]
    pub fn rights(self, heads: &[&str]) -> Table {
        heads.iter().fold(self, |t, h| t.right(h))
    }

    /// Adds a column. A table whose headers are all empty prints no
    /// header line.
    #[must_use]
    pub fn column(mut self, head: &str, align: Align) -> Table {
        self.head.push(head.to_string());
        self.align.push(align);
        self
    }

    /// A line printed above the header.
    #[must_use]
    pub fn title(mut self, title: &str) -> Table {
        self.title = Some(title.to_string());
        self
    }

    /// Spaces before every line of the header and body.
    #[must_use]
    pub fn indent(mut self, spaces: usize) -> Table {
        self.indent = " ".repeat(spaces);
        self
    }

    /// Spaces between two cells (one unless told).
    #[must_use]
    pub fn gap(mut self, spaces: usize) -> Table {
        self.gap = " ".repeat(spaces);
        self
    }

    /// A line of dashes under the header, as wide as the table.
    #[must_use]
    pub fn rule(mut self) -> Table {
        self.rule = true;
        self
    }

    /// Adds a row. Cells past the last column are laid out as if left
    /// aligned; a row may have fewer cells than columns.
    pub fn row<I, S>(&mut self, cells: I) -> &mut Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.row_tail(cells, "")
    }

    /// Adds a row followed by `tail`, text that stands after the last
    /// cell and does not widen any column.
    pub fn row_tail<I, S>(&mut self, cells: I, tail: &str) -> &mut Table
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.rows.push(Row {
            cells: cells.into_iter().map(Into::into).collect(),
            tail: tail.to_string(),
        });
        self
    }

    /// Adds a line of free text between the rows, sized for no column.
    pub fn text(&mut self, text: &str) -> &mut Table {
        self.row_tail(std::iter::empty::<String>(), text)
    }

    /// Adds a line printed below the table.
    pub fn note(&mut self, note: &str) -> &mut Table {
        self.notes.push(note.to_string());
        self
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Each column's width: its widest cell, header included.
    fn widths(&self) -> Vec<usize> {
        let mut w: Vec<usize> = self.head.iter().map(|h| h.chars().count()).collect();
        for r in &self.rows {
            for (i, c) in r.cells.iter().enumerate() {
                let n = c.chars().count();
                match w.get_mut(i) {
                    Some(x) => *x = (*x).max(n),
                    None => w.push(n),
                }
            }
        }
        w
    }

    fn line(&self, o: &mut String, cells: &[String], tail: &str, widths: &[usize]) {
        let mut l = self.indent.clone();
        for (i, c) in cells.iter().enumerate() {
            if i > 0 {
                l.push_str(&self.gap);
            }
            let pad = widths
                .get(i)
                .copied()
                .unwrap_or(0)
                .saturating_sub(c.chars().count());
            match self.align.get(i).copied().unwrap_or(Align::Left) {
                Align::Left => {
                    l.push_str(c);
                    l.extend(std::iter::repeat_n(' ', pad));
                }
                Align::Right => {
                    l.extend(std::iter::repeat_n(' ', pad));
                    l.push_str(c);
                }
            }
        }
        l.push_str(tail);
        o.push_str(l.trim_end());
        o.push('\n');
    }

    /// The table as text, every line ending in a newline.
    pub fn render(&self) -> String {
        let widths = self.widths();
        let mut o = String::new();
        if let Some(t) = &self.title {
            o.push_str(t);
            o.push('\n');
        }
        if self.head.iter().any(|h| !h.is_empty()) {
            self.line(&mut o, &self.head, "", &widths);
        }
        if self.rule {
            let gaps = self.gap.len() * widths.len().saturating_sub(1);
            o.push_str(&self.indent);
            o.push_str(&"-".repeat(widths.iter().sum::<usize>() + gaps));
            o.push('\n');
        }
        for r in &self.rows {
            self.line(&mut o, &r.cells, &r.tail, &widths);
        }
        for n in &self.notes {
            o.push_str(n);
            o.push('\n');
        }
        o
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_take_the_widest_cell_and_align() {
        let mut t = Table::new().left("name").right("n");
        t.row(["a", "12345"]);
        t.row(["longer name", "1"]);
        assert_eq!(
            t.render(),
            "name            n\na           12345\nlonger name     1\n"
        );
    }

    #[test]
    fn title_notes_indent_and_gap() {
        let mut t = Table::new()
            .title("T")
            .indent(2)
            .gap(3)
            .right("x")
            .left("y");
        t.row(["1", "b"]);
        t.note("note");
        assert_eq!(t.render(), "T\n  x   y\n  1   b\nnote\n");
        assert_eq!(t.to_string(), t.render());
    }

    #[test]
    fn wide_characters_count_once_and_lines_are_trimmed() {
        let mut t = Table::new().left("µs").left("÷").right("z");
        t.row(["µµµ", "", "→"]);
        let r = t.render();
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines[0], "µs  ÷ z");
        assert_eq!(lines[1], "µµµ   →");
    }

    #[test]
    fn tails_do_not_widen_and_short_or_long_rows_render() {
        let mut t = Table::new().left("a").right("b");
        t.row_tail(["x", "1"], "  (tail text)");
        t.row(["only"]);
        t.row(["p", "q", "extra"]);
        t.text("\t free");
        let r = t.render();
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines[0], "a    b");
        assert_eq!(lines[1], "x    1  (tail text)");
        assert_eq!(lines[2], "only");
        assert_eq!(lines[3], "p    q extra");
        assert_eq!(lines[4], "\t free");
        assert!(!t.is_empty());
        assert!(Table::default().is_empty());
        assert_eq!(Table::default().render(), "");
    }

    #[test]
    fn no_header_line_when_every_head_is_empty() {
        let mut t = Table::new().indent(1).left("").right("");
        t.row(["ab", "1"]);
        t.row(["c", "22"]);
        assert_eq!(t.render(), " ab  1\n c  22\n");
    }

    #[test]
    fn rule_spans_the_columns_and_gaps() {
        let mut t = Table::new().gap(2).rule().rights(&["a", "long head"]);
        t.row(["xxxxx", "1"]);
        let r = t.render();
        let lines: Vec<&str> = r.lines().collect();
        assert_eq!(lines[0], "    a  long head");
        assert_eq!(lines[1], "-".repeat(16));
        assert_eq!(lines[2], "xxxxx          1");
    }
}
