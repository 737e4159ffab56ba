//! Every relative link in the repository's markdown files (README.md,
//! docs/, tools/, tests/vm/, workloads/, ...) points to a path that exists,
//! so moving a file cannot silently break the docs.

use std::path::{Path, PathBuf};

/// Link destinations in markdown text: inline links and images
/// `[text](dest)`, `![alt](dest "title")`, `[text](<dest>)`, and reference
/// definitions `[label]: dest`. Fenced code blocks and inline code spans
/// are skipped. Each comes with its 1-based line number.
fn link_targets(md: &str) -> Vec<(usize, String)> {
    let mut out = vec![];
    let mut fence: Option<&str> = None;
    for (i, line) in md.lines().enumerate() {
        let t = line.trim_start();
        if let Some(f) = fence {
            if t.starts_with(f) {
                fence = None;
            }
            continue;
        }
        if t.starts_with("```") || t.starts_with("~~~") {
            fence = Some(&t[..3]);
            continue;
        }
        let text = without_code_spans(line);
        // Reference definition: `[label]: dest`.
        if let Some(rest) = text.trim_start().strip_prefix('[') {
            if let Some((label, dest)) = rest.split_once("]:") {
                if !label.is_empty() && !label.contains(']') {
                    if let Some(d) = dest.split_whitespace().next() {
                        out.push((i + 1, unbracket(d).to_string()));
                    }
                    continue;
                }
            }
        }
        let mut s = text.as_str();
        while let Some(at) = s.find("](") {
            let after = &s[at + 2..];
            // The destination ends at the parenthesis that closes it
            // (destinations may hold balanced parentheses).
            let mut depth = 0usize;
            let mut end = after.len();
            for (j, c) in after.char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' if depth == 0 => {
                        end = j;
                        break;
                    }
                    ')' => depth -= 1,
                    _ => {}
                }
            }
            let inner = after[..end].trim();
            let dest = match inner.strip_prefix('<') {
                Some(bracketed) => bracketed.split('>').next().unwrap_or(""),
                None => inner.split_whitespace().next().unwrap_or(""),
            };
            if !dest.is_empty() {
                out.push((i + 1, dest.to_string()));
            }
            s = &after[end.min(after.len())..];
        }
    }
    out
}

fn unbracket(d: &str) -> &str {
    d.strip_prefix('<')
        .and_then(|d| d.strip_suffix('>'))
        .unwrap_or(d)
}

/// The line with every `code span` removed.
fn without_code_spans(line: &str) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(open) = rest.find('`') {
        out.push_str(&rest[..open]);
        let ticks = rest[open..].chars().take_while(|&c| c == '`').count();
        let after = &rest[open + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(close) => rest = &after[close + ticks..],
            None => {
                rest = after;
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// The file a destination names, relative to the markdown file's
/// directory (or the repository root for `/path`); None for URLs and
/// links within the same page.
fn local_path(root: &Path, md_dir: &Path, dest: &str) -> Option<PathBuf> {
    let path = dest.split('#').next().unwrap_or("");
    let path = path.split('?').next().unwrap_or("");
    if path.is_empty() || path.contains("://") || path.starts_with("mailto:") {
        return None;
    }
    let path = path.replace("%20", " ");
    Some(match path.strip_prefix('/') {
        Some(abs) => root.join(abs),
        None => md_dir.join(path),
    })
}

/// Markdown files of the repository, build output and hidden folders
/// (.git, .ci-clone, ...) left out.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .flatten()
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        let p = e.path();
        if name.starts_with('.') {
            continue;
        }
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            if name != "target" && name != "build" {
                markdown_files(&p, out);
            }
        } else if name.ends_with(".md") {
            out.push(p);
        }
    }
}

#[test]
fn every_relative_markdown_link_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = vec![];
    markdown_files(root, &mut files);
    assert!(
        files.iter().any(|f| f.ends_with("README.md")),
        "no markdown found under {}",
        root.display()
    );
    let mut broken = vec![];
    let mut checked = 0;
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let dir = f.parent().unwrap();
        for (line, dest) in link_targets(&text) {
            if let Some(p) = local_path(root, dir, &dest) {
                checked += 1;
                if !p.exists() {
                    broken.push(format!(
                        "{}:{line}: {dest}",
                        f.strip_prefix(root).unwrap_or(f).display()
                    ));
                }
            }
        }
    }
    assert!(checked > 10, "only {checked} relative links found");
    assert!(
        broken.is_empty(),
        "{} broken relative link(s):\n  {}",
        broken.len(),
        broken.join("\n  ")
    );
}

#[test]
fn links_are_found_and_code_is_skipped() {
    let md = "See [a](docs/a.md#part) and ![p](p.png \"title\").\n\
              `[not](code.md)` but [b](<with space.md>) and [c](x_(1).md)\n\
              ```sh\n[fenced](no.md)\n```\n\
              [ref]: ../r.md\n\
              [web](https://example.com) [here](#anchor)\n";
    let got: Vec<(usize, String)> = link_targets(md);
    let want: Vec<(usize, String)> = [
        (1, "docs/a.md#part"),
        (1, "p.png"),
        (2, "with space.md"),
        (2, "x_(1).md"),
        (6, "../r.md"),
        (7, "https://example.com"),
        (7, "#anchor"),
    ]
    .iter()
    .map(|(l, d)| (*l, d.to_string()))
    .collect();
    assert_eq!(got, want);

    let root = Path::new("/repo");
    let dir = Path::new("/repo/docs");
    assert_eq!(
        local_path(root, dir, "../tools/x.md#y"),
        Some(PathBuf::from("/repo/docs/../tools/x.md"))
    );
    assert_eq!(
        local_path(root, dir, "/README.md"),
        Some(PathBuf::from("/repo/README.md"))
    );
    assert_eq!(local_path(root, dir, "https://a/b.md"), None);
    assert_eq!(local_path(root, dir, "#anchor"), None);
    assert_eq!(local_path(root, dir, "mailto:x@y"), None);
}

#[test]
fn a_broken_link_is_reported() {
    let root = std::env::temp_dir().join(format!("doc-links-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::write(root.join("docs/here.md"), "").unwrap();
    let md = "[ok](here.md) [gone](moved/away.md) [up](../docs/here.md)";
    let dir = root.join("docs");
    let missing: Vec<String> = link_targets(md)
        .into_iter()
        .filter(|(_, d)| !local_path(&root, &dir, d).unwrap().exists())
        .map(|(_, d)| d)
        .collect();
    assert_eq!(missing, vec!["moved/away.md".to_string()]);
    std::fs::remove_dir_all(&root).unwrap();
}
