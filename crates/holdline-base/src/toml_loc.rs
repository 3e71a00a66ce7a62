//! Where in a TOML text an error is: the line and the dotted key, for configuration errors
//! that name the file, the line and the key (the server's configuration, the simulator's
//! scenarios). Plain text scanning, no TOML parser: the parsers give a byte offset (or only
//! a key path), and these functions turn it into what a person looks for.

/// The 1-based line of byte `offset` and the dotted key written on that line (or the nearest
/// line above that assigns one), prefixed by its table.
pub fn locate(text: &str, offset: usize) -> (usize, String) {
    let offset = offset.min(text.len());
    let lines: Vec<&str> = text.split('\n').collect();
    let line_idx = text.get(..offset).map_or(0, |t| t.matches('\n').count());
    let mut key = None;
    for l in lines[..=line_idx.min(lines.len().saturating_sub(1))]
        .iter()
        .rev()
    {
        let t = l.trim();
        if let Some(h) = table_header(t) {
            key = Some(key.unwrap_or_else(|| h.to_owned()));
            break;
        }
        if let Some((k, _)) = t.split_once('=')
            && !t.starts_with('#')
            && key.is_none()
        {
            key = Some(k.trim().trim_matches('"').to_owned());
            break;
        }
    }
    let key = key.unwrap_or_else(|| "-".into());
    let table = lines[..line_idx.min(lines.len())]
        .iter()
        .rev()
        .find_map(|l| table_header(l.trim()));
    let key = match table {
        Some(t) if t != key && !key.starts_with(&format!("{t}.")) => format!("{t}.{key}"),
        _ => key,
    };
    (line_idx + 1, key)
}

fn table_header(t: &str) -> Option<&str> {
    let inner = t.strip_prefix("[[").and_then(|s| s.split("]]").next());
    let inner = inner.or_else(|| t.strip_prefix('[').and_then(|s| s.split(']').next()));
    inner.map(str::trim)
}

/// The 1-based line where dotted `key` is assigned (0 when absent). `table[N].name` names
/// the key in the N-th (0-based) `[[table]]` entry.
pub fn find_key_line(text: &str, key: &str) -> usize {
    let (table, name) = key.rsplit_once('.').unwrap_or(("", key));
    let (table, index) = match table.strip_suffix(']').and_then(|t| t.split_once('[')) {
        Some((t, n)) => (t, n.parse::<usize>().ok()),
        None => (table, None),
    };
    let mut current = "";
    let mut seen = 0usize;
    for (i, l) in text.lines().enumerate() {
        let t = l.trim();
        if let Some(h) = table_header(t) {
            current = h;
            if h == table {
                seen += 1;
            }
            continue;
        }
        if current == table
            && index.is_none_or(|n| seen == n + 1)
            && let Some((k, _)) = t.split_once('=')
            && k.trim().trim_matches('"') == name
        {
            return i + 1;
        }
    }
    0
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str =
        "a = 1\n[server]\nport = 5\n\n[[routes]]\nto = \"x\"\n[[routes]]\nto = \"y\"\n";

    #[test]
    fn offsets_map_to_their_line_and_dotted_key() {
        assert_eq!(locate(TEXT, 0), (1, "a".into()));
        let port = TEXT.find("5").unwrap_or(0);
        assert_eq!(locate(TEXT, port), (3, "server.port".into()));
        let y = TEXT.find("\"y\"").unwrap_or(0);
        assert_eq!(locate(TEXT, y), (8, "routes.to".into()));
        // Past the end, and inside a multi-byte character: no panic.
        assert_eq!(locate(TEXT, usize::MAX).0, 9);
        assert_eq!(locate("k = \"é\"", 6).0, 1);
    }

    #[test]
    fn keys_map_to_the_line_assigning_them() {
        assert_eq!(find_key_line(TEXT, "a"), 1);
        assert_eq!(find_key_line(TEXT, "server.port"), 3);
        assert_eq!(find_key_line(TEXT, "routes[1].to"), 8);
        assert_eq!(find_key_line(TEXT, "routes[0].to"), 6);
        assert_eq!(find_key_line(TEXT, "nope"), 0);
    }
}
