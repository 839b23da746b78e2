//! Classification data: `text,label` records, as JSON Lines (`{"text": ..., "label": ...}`
//! per line, a `.jsonl` file) or CSV with a header row naming the `text` and `label` columns
//! (any other file). A label is a class's index or its name.

use std::path::Path;

use fblayout_hf::tokenizer::{EncodeOptions, Padding, Tokenizer};

use super::{DataError, Example, read_lines};

/// One record: its line, its text and its class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClassifyExample {
    /// The line it starts on, from 1.
    pub line: usize,
    /// The text.
    pub text: String,
    /// The class, below the number of classes.
    pub label: u32,
}

/// The records of `file` for a head over `classes` (their names, index by index): each
/// record's text and class. An error names the line of a record that is not valid JSON or
/// CSV, lacks a column, or has a label outside the classes; a file without records is empty.
pub fn read_classify(file: &Path, classes: &[String]) -> Result<Vec<ClassifyExample>, DataError> {
    let jsonl = file.extension().is_some_and(|e| e == "jsonl");
    let records = if jsonl {
        read_jsonl(file)?
    } else {
        read_csv(file)?
    };
    if records.is_empty() {
        return Err(DataError::Empty {
            file: file.to_owned(),
            detail: "no record".into(),
        });
    }
    records
        .into_iter()
        .map(|(line, text, label)| {
            Ok(ClassifyExample {
                line,
                text,
                label: class(file, line, &label, classes)?,
            })
        })
        .collect()
}

/// The class of `label` (an index or a name) among `classes`.
fn class(file: &Path, line: usize, label: &str, classes: &[String]) -> Result<u32, DataError> {
    let by_index = label.parse::<usize>().ok().filter(|&i| i < classes.len());
    let by_name = || classes.iter().position(|c| c == label);
    by_index
        .or_else(by_name)
        .map(|i| i as u32)
        .ok_or_else(|| DataError::Label {
            file: file.to_owned(),
            line,
            label: label.to_owned(),
            classes: classes.len(),
            names: if classes.is_empty() {
                String::new()
            } else {
                format!(", or {}", classes.join(", "))
            },
        })
}

/// `(line, text, label)` of every non-blank line of a JSON Lines file.
fn read_jsonl(file: &Path) -> Result<Vec<(usize, String, String)>, DataError> {
    let mut out = Vec::new();
    for (line, text) in read_lines(file)? {
        if text.trim().is_empty() {
            continue;
        }
        let syntax = |detail: String| DataError::Syntax {
            file: file.to_owned(),
            line,
            detail,
        };
        let value: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| syntax(format!("not JSON: {e}")))?;
        let missing = |column| DataError::MissingColumn {
            file: file.to_owned(),
            line,
            column,
        };
        let body = value
            .get("text")
            .ok_or_else(|| missing("text"))?
            .as_str()
            .ok_or_else(|| syntax("`text` is not a string".into()))?
            .to_owned();
        let label = match value.get("label").ok_or_else(|| missing("label"))? {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Number(n) => n.to_string(),
            other => {
                return Err(syntax(format!(
                    "`label` is {other}, not a number or a name"
                )));
            }
        };
        out.push((line, body, label));
    }
    Ok(out)
}

/// `(line, text, label)` of every record of a CSV file with a header.
fn read_csv(file: &Path) -> Result<Vec<(usize, String, String)>, DataError> {
    // Read through `read_lines` first, so that invalid UTF-8 is reported the same way.
    let lines = read_lines(file)?;
    let joined: String = lines
        .iter()
        .map(|(_, l)| l.as_str())
        .collect::<Vec<_>>()
        .join("\n");
    let mut reader = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(joined.as_bytes());
    let headers = reader.headers().map_err(|e| DataError::Syntax {
        file: file.to_owned(),
        line: 1,
        detail: e.to_string(),
    })?;
    let column = |name: &'static str| {
        headers
            .iter()
            .position(|h| h.trim() == name)
            .ok_or(DataError::MissingColumn {
                file: file.to_owned(),
                line: 1,
                column: name,
            })
    };
    let (text_at, label_at) = (column("text")?, column("label")?);
    let mut out = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| DataError::Syntax {
            file: file.to_owned(),
            line: e.position().map_or(0, |p| p.line() as usize),
            detail: e.to_string(),
        })?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        let field = |at: usize, name| {
            record.get(at).ok_or(DataError::MissingColumn {
                file: file.to_owned(),
                line,
                column: name,
            })
        };
        let text = field(text_at, "text")?.to_owned();
        let label = field(label_at, "label")?.trim().to_owned();
        out.push((line, text, label));
    }
    Ok(out)
}

/// `examples` (from `file`) tokenized to `seq` tokens each (truncated, padded with `pad`): an
/// [`Example`] whose one label is the class.
pub fn encode(
    file: &Path,
    examples: &[ClassifyExample],
    tokenizer: &Tokenizer,
    seq: usize,
    pad: u32,
) -> Result<Vec<Example>, DataError> {
    let failed = |source| DataError::Tokenizer {
        file: file.to_owned(),
        source,
    };
    let mut tokenizer = tokenizer.clone();
    tokenizer
        .set_options(EncodeOptions {
            max_length: Some(seq),
            padding: Padding::Fixed(seq),
            pad_id: Some(pad),
        })
        .map_err(failed)?;
    let batch = tokenizer
        .encode_batch(examples.iter().map(|e| e.text.as_str()))
        .map_err(failed)?;
    Ok(batch
        .input_ids
        .into_iter()
        .zip(examples)
        .map(|(ids, e)| Example {
            ids,
            labels: vec![e.label],
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn classes() -> Vec<String> {
        vec!["NEG".into(), "POS".into()]
    }

    fn write(name: &str, body: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(name);
        std::fs::write(&file, body).unwrap();
        (dir, file)
    }

    #[test]
    fn jsonl_and_csv_give_the_same_records_with_labels_by_index_or_name() {
        let (_d, jsonl) = write(
            "d.jsonl",
            "{\"text\": \"good\", \"label\": 1}\n\n{\"text\": \"bad\", \"label\": \"NEG\"}\n",
        );
        let (_e, csv) = write("d.csv", "label,text\n1,good\nNEG,\"bad\"\n");
        let want = |l2| {
            vec![
                ClassifyExample {
                    line: 1,
                    text: "good".into(),
                    label: 1,
                },
                ClassifyExample {
                    line: l2,
                    text: "bad".into(),
                    label: 0,
                },
            ]
        };
        assert_eq!(read_classify(&jsonl, &classes()).unwrap(), want(3));
        assert_eq!(read_classify(&csv, &classes()).unwrap(), {
            let mut w = want(3);
            w[0].line = 2;
            w
        });
    }

    #[test]
    fn each_bad_record_is_an_error_naming_file_and_line() {
        let (_d, f) = write(
            "a.jsonl",
            "{\"text\": \"x\", \"label\": 0}\n{\"text\": \"y\", \"label\": 2}\n",
        );
        match read_classify(&f, &classes()) {
            Err(DataError::Label {
                line: 2,
                classes: 2,
                ref label,
                ..
            }) if label == "2" => {}
            other => panic!("{other:?}"),
        }
        let (_d, f) = write("b.jsonl", "{\"label\": 0}\n");
        assert!(matches!(
            read_classify(&f, &classes()),
            Err(DataError::MissingColumn {
                line: 1,
                column: "text",
                ..
            })
        ));
        let (_d, f) = write("c.csv", "text\nhello\n");
        let e = read_classify(&f, &classes()).unwrap_err();
        assert!(
            matches!(
                e,
                DataError::MissingColumn {
                    line: 1,
                    column: "label",
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string().starts_with(&format!("{}:1:", f.display())),
            "{e}"
        );
        let (_d, f) = write("d.csv", "text,label\nok,1\nshort\n");
        assert!(matches!(
            read_classify(&f, &classes()),
            Err(DataError::MissingColumn {
                line: 3,
                column: "label",
                ..
            })
        ));
        let (_d, f) = write("e.csv", "text,label\nok,MAYBE\n");
        let e = read_classify(&f, &classes()).unwrap_err();
        assert!(e.to_string().contains("e.csv:2:"), "{e}");
        let (_d, f) = write("f.jsonl", "\n\n");
        assert!(matches!(
            read_classify(&f, &classes()),
            Err(DataError::Empty { .. })
        ));
        let (_d, f) = write("g.jsonl", "{\"text\": 1,");
        assert!(matches!(
            read_classify(&f, &classes()),
            Err(DataError::Syntax { line: 1, .. })
        ));
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("h.csv");
        std::fs::write(&f, b"text,label\n\xc3(,1\n").unwrap();
        assert!(matches!(
            read_classify(&f, &classes()),
            Err(DataError::InvalidUtf8 {
                line: 2,
                column: 1,
                ..
            })
        ));
    }
}
