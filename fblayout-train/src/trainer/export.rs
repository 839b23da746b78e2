//! The export at the end of a run (see [`EXPORT_DIR`](super::EXPORT_DIR)), through
//! [`fblayout_hf::export`], every file written atomically.

use std::path::Path;

use fblayout_hf::CONFIG_FILE;
use fblayout_hf::export::{self, ExportError};

use super::{EXPORT_ADAPTER, EXPORT_MODEL, TrainError, Trainer};

impl Trainer<'_> {
    /// Exports what was trained into `out`: the full model (`model/`), or LoRA's adapters
    /// (`adapter/`) and, with `merge`, the model with them merged (`model/`).
    pub(super) fn export(&self, out: &Path) -> Result<(), TrainError> {
        let values = self.weights()?;
        let model = out.join(EXPORT_MODEL);
        match &self.lora {
            None => export::model(&self.dir, &self.graph, &values, None, &model)?,
            Some(lora) => {
                let base = self.settings.model.to_string_lossy();
                let adapter = out.join(EXPORT_ADAPTER);
                export::adapter(&self.dir, &self.graph, &values, lora, Some(&base), &adapter)?;
                if self.settings.merge {
                    export::model(&self.dir, &self.graph, &values, Some(lora), &model)?;
                }
            }
        }
        if self.relabelled && model.exists() {
            self.relabel(&model.join(CONFIG_FILE))?;
        }
        Ok(())
    }

    /// Rewrites the exported `config.json` `file` with the head's classes (`id2label`,
    /// `label2id`), where they differ from the source's.
    fn relabel(&self, file: &Path) -> Result<(), TrainError> {
        let io = |source: std::io::Error| ExportError::Io {
            file: file.to_owned(),
            source,
        };
        let text = std::fs::read_to_string(file).map_err(io)?;
        let mut config: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| io(e.into()))?;
        if let Some(fields) = config.as_object_mut() {
            let id2label: serde_json::Map<_, _> = (self.classes.iter().enumerate())
                .map(|(i, c)| (i.to_string(), c.clone().into()))
                .collect();
            let label2id: serde_json::Map<_, _> = (self.classes.iter().enumerate())
                .map(|(i, c)| (c.clone(), i.into()))
                .collect();
            fields.remove("num_labels");
            fields.insert("id2label".into(), id2label.into());
            fields.insert("label2id".into(), label2id.into());
        }
        let text = serde_json::to_string_pretty(&config).map_err(|e| io(e.into()))?;
        fblayout_hf::files::write_atomically(file, text.as_bytes()).map_err(io)?;
        Ok(())
    }
}
