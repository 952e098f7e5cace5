//! A query's answer as an Arrow IPC stream, encoded batch by batch as DuckDB hands the
//! batches over, in pieces that go to the socket as they are: each batch's buffers are
//! copied once (by Arrow's encoder), never again into one large buffer, and the body's
//! exact length is known before the first byte is sent.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use arrow::datatypes::Schema;
use arrow::ipc::writer::{
    CompressionContext, DictionaryTracker, EncodedData, IpcDataGenerator, IpcWriteOptions,
    write_message,
};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};

use crate::error::{Error, Result};
use crate::memory::{Charge, attach_each};

/// An Arrow IPC stream being written: the schema, then each batch.
pub struct IpcStream {
    pieces: Vec<Bytes>,
    /// Batches not yet encoded: DuckDB hands over 2,048 rows at a time, and a reader
    /// pays for each message (a client reading through Python most of all).
    pending: Vec<RecordBatch>,
    pending_rows: usize,
    pending_bytes: usize,
    len: u64,
    generator: IpcDataGenerator,
    dictionaries: DictionaryTracker,
    options: IpcWriteOptions,
    compression: CompressionContext,
    /// What the stream holds, charged to the server's answer memory: the batches not
    /// yet encoded and the pieces not yet handed over. A piece handed over takes its
    /// part along, given back once it is sent.
    charge: Option<Charge>,
}

/// Rows per encoded batch (DuckDB's Python package hands over a million at a time).
const BATCH_ROWS: usize = 65_536;
/// ... or as many as make this many bytes, for wide rows.
const BATCH_BYTES: usize = 8 << 20;

fn failed(e: arrow::error::ArrowError) -> Error {
    Error::internal(format!("cannot encode the result: {e}"))
}

impl IpcStream {
    /// A stream whose held bytes are charged to `charge` (none: uncharged).
    pub fn new(schema: &Schema, charge: Option<Charge>) -> Result<IpcStream> {
        let mut s = IpcStream {
            charge,
            pieces: Vec::new(),
            pending: Vec::new(),
            pending_rows: 0,
            pending_bytes: 0,
            len: 0,
            generator: IpcDataGenerator::default(),
            dictionaries: DictionaryTracker::new(false),
            options: IpcWriteOptions::default(),
            compression: CompressionContext::default(),
        };
        let encoded = s.generator.schema_to_bytes_with_dictionary_tracker(
            schema,
            &mut s.dictionaries,
            &s.options,
        );
        s.message(encoded)?;
        Ok(s)
    }

    /// Adds a batch; batches are encoded together once they hold [`BATCH_ROWS`] rows.
    pub fn push(&mut self, batch: &RecordBatch) -> Result<()> {
        self.pending_rows += batch.num_rows();
        self.pending_bytes += batch.get_array_memory_size();
        self.pending.push(batch.clone());
        if self.pending_rows >= BATCH_ROWS || self.pending_bytes >= BATCH_BYTES {
            self.flush()?;
        }
        self.recharge()
    }

    /// Sets the charge to what the stream holds now (or fails: no room in the budget).
    fn recharge(&mut self) -> Result<()> {
        let held =
            self.pending_bytes as u64 + self.pieces.iter().map(|p| p.len() as u64).sum::<u64>();
        match &mut self.charge {
            Some(c) => c.set(held),
            None => Ok(()),
        }
    }

    /// Encodes the pending batches as one.
    fn flush(&mut self) -> Result<()> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        self.pending_bytes = 0;
        let batch = match pending.len() {
            0 => return Ok(()),
            1 => pending.into_iter().next().expect("one batch"),
            _ => arrow::compute::concat_batches(&pending[0].schema(), &pending).map_err(failed)?,
        };
        self.encode(&batch)
    }

    fn encode(&mut self, batch: &RecordBatch) -> Result<()> {
        let (dictionaries, encoded) = self
            .generator
            .encode(
                batch,
                &mut self.dictionaries,
                &self.options,
                &mut self.compression,
            )
            .map_err(failed)?;
        for d in dictionaries {
            self.message(d)?;
        }
        self.message(encoded)
    }

    /// One message: its header written here, its body (already aligned) kept as the
    /// encoder made it.
    fn message(&mut self, mut encoded: EncodedData) -> Result<()> {
        let body = std::mem::take(&mut encoded.arrow_data);
        let mut head = Vec::with_capacity(encoded.ipc_message.len() + 16);
        write_message(&mut head, encoded, &self.options).map_err(failed)?;
        self.add(head);
        if !body.is_empty() {
            self.add(body);
        }
        Ok(())
    }

    fn add(&mut self, piece: Vec<u8>) {
        self.len += piece.len() as u64;
        self.pieces.push(Bytes::from(piece));
    }

    /// The bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.len
    }

    /// The pieces written so far, handed over (a stream sent as it is written).
    pub fn drain(&mut self) -> Vec<Bytes> {
        let pieces = std::mem::take(&mut self.pieces);
        match &mut self.charge {
            Some(c) => {
                let part = c.split(pieces.iter().map(|p| p.len() as u64).sum());
                attach_each(part, pieces)
            }
            None => pieces,
        }
    }

    /// Ends the stream: what is pending, then the end-of-stream marker.
    pub fn end(&mut self) -> Result<()> {
        self.flush()?;
        let mut end = Vec::with_capacity(8);
        end.extend_from_slice(&[0xff; 4]);
        end.extend_from_slice(&0i32.to_le_bytes());
        self.add(end);
        self.recharge()
    }

    /// The stream, ended, as a response body.
    pub fn finish(mut self) -> Result<IpcBody> {
        self.end()?;
        let remaining = self.len;
        Ok(IpcBody {
            remaining,
            pieces: self.drain().into(),
        })
    }
}

/// A finished stream as an HTTP body of known length (a `Content-Length` answer that
/// clients can read into one buffer); any answer made of pieces, too (the JSON one).
pub struct IpcBody {
    pieces: VecDeque<Bytes>,
    remaining: u64,
}

impl IpcBody {
    /// A body of these pieces, in order.
    pub fn from_pieces(pieces: Vec<Bytes>) -> IpcBody {
        IpcBody {
            remaining: pieces.iter().map(|p| p.len() as u64).sum(),
            pieces: pieces.into(),
        }
    }
}

impl Body for IpcBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.pieces.pop_front().map(|piece| {
            self.remaining -= piece.len() as u64;
            Ok(Frame::data(piece))
        }))
    }

    fn is_end_stream(&self) -> bool {
        self.pieces.is_empty()
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{ArrayRef, DictionaryArray, Int64Array, StringArray};
    use arrow::datatypes::Int32Type;
    use http_body_util::BodyExt;

    use super::*;

    /// The pieces make a stream Arrow reads back as the batches pushed, coalesced.
    #[tokio::test]
    async fn the_pieces_are_one_arrow_stream() {
        let dict: DictionaryArray<Int32Type> = vec!["a", "b", "a"].into_iter().collect();
        let batch = RecordBatch::try_from_iter([
            ("n", Arc::new(Int64Array::from(vec![1, 2, 3])) as ArrayRef),
            (
                "s",
                Arc::new(StringArray::from(vec![Some("x"), None, Some("zz")])) as ArrayRef,
            ),
            ("d", Arc::new(dict) as ArrayRef),
        ])
        .unwrap();
        let mut s = IpcStream::new(&batch.schema(), None).unwrap();
        s.push(&batch).unwrap();
        s.push(&batch.slice(1, 2)).unwrap();
        let body = s.finish().unwrap();
        let len = body.size_hint().exact().unwrap();
        let got = body.collect().await.unwrap().to_bytes();
        assert_eq!(got.len() as u64, len);
        let reader =
            arrow::ipc::reader::StreamReader::try_new(std::io::Cursor::new(got), None).unwrap();
        let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().unwrap();
        let expected =
            arrow::compute::concat_batches(&batch.schema(), &[batch.clone(), batch.slice(1, 2)])
                .unwrap();
        assert_eq!(batches, vec![expected]);
    }
}
