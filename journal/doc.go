// Package journal is a crash-safe, append-only journal of opaque records in
// a directory: what the analytics flusher keeps on disk while the store
// fails, until the store has it. It knows nothing of what the records hold.
//
// The life of a record: Append writes it and returns once it is on disk;
// Scan streams the records not yet acked, oldest first; once a record has
// been applied elsewhere, Ack of its position lets the journal forget it
// and everything before it; at a size cap (ErrFull), Fold replaces the
// oldest records with one record computed from them (coarser counts)
// before anything has to be dropped.
//
//	j, err := journal.Open(dir, journal.Options{MaxBytes: 256 << 20})
//	pos, err := j.Append(rec)                   // on disk when it returns
//	err = j.Scan(j.Acked(), func(end journal.Pos, rec []byte) error {
//		if err := apply(rec); err != nil {
//			return err                          // stops the scan
//		}
//		return j.Ack(end)                       // applied: forget it
//	})
//
// # Record format
//
// A record is stored as a frame: a 12-byte header, then the payload.
//
//	offset 0  uint32  payload length (little-endian), at most MaxRecordBytes
//	offset 4  uint32  CRC-32C (Castagnoli) of the payload
//	offset 8  uint32  CRC-32C of the 8 bytes above
//	offset 12         payload
//
// The header's own CRC makes the length trustworthy by itself: a damaged
// payload costs that record only, and after a damaged header the next
// frame whose header and payload both check is found again (by chance a
// header checks once in 2^32 offsets, and its payload then too once in 2^32
// more).
//
// # Files
//
// All in the journal's directory (created with mode 0700; files 0600):
//
//	seg-<n>.log            a segment: frames back to back from offset 0. n
//	                       (20 digits) grows by one per segment; appends go
//	                       to the highest, and a new one starts when a record
//	                       would take the current past Options.SegmentBytes.
//	fold-<seg>-<off>-<gen>.log
//	                       a folded record: a 40-byte header ("LGJF", the
//	                       range (from, to] it replaces as two (segment,
//	                       offset) pairs, CRC-32C) and one frame. Its record
//	                       ends at to = <seg>:<off>; gen grows with every
//	                       fold, so that folding the folded record alone
//	                       again makes a new file, not one of the same name.
//	next.spare             with Options.Preallocate: an empty file with a
//	                       segment's space allocated, renamed to the next
//	                       segment when one starts.
//	ack                    the ack position: "LGJA", segment, offset (uint64
//	                       each) and CRC-32C; 24 bytes. Created by Open.
//	*.tmp                  an ack or fold file being written; Open removes it.
//	LOCK                   flock(2)ed while a Journal has the directory open.
//
// A Pos is (segment, offset just after the record's frame), so positions
// order records as they were appended, and a folded record takes the
// position of the last record it replaces.
//
// # Sync points
//
//   - Append: the frame is written with pwrite and fdatasync'd before Append
//     returns; creating a segment fsyncs the directory first, so a record
//     said to be on disk is also in a file that is.
//   - A failed write or sync (ENOSPC, EIO) truncates the segment back to
//     where the record started: no part of it is left, and the next Append
//     writes there. If even the truncate fails, the segment is closed for
//     appends and the next record goes to a new one.
//   - Ack and Fold write their file to a *.tmp, fdatasync it, rename it into
//     place and fsync the directory, and only then remove the files they
//     make obsolete (and fsync the directory again).
//   - On a full disk (ENOSPC) Ack overwrites the ack file in place instead
//     (Open creates it, so its block exists) and fdatasyncs it: acks are
//     what give space back, so a full disk must not stop them. The 24 bytes
//     sit in one sector; were they torn anyway, the CRC would refuse them
//     (Stats.AckLost) and records would be scanned again, never skipped.
//
// # Crash guarantees
//
// A crash (kill -9, power loss) at any moment leaves a directory that Open
// recovers:
//
//   - Every record whose Append returned is kept. Only the last append can
//     be torn (each returns after its sync): a tail of the newest segment
//     with no good frame in it is truncated and counted
//     (Stats.TornBytes). An Append that had not returned may or may not be
//     kept, never partly. (Damage at the very end of the newest segment
//     cannot be told from a torn append and is cut the same way.)
//   - Damage elsewhere (bit rot, a torn write in an older segment) never
//     panics and never returns a damaged record: the damaged bytes are
//     skipped, counted (Stats.Corrupt, Stats.LostBytes) and scans go on with
//     the next good frame, or the next segment when there is none.
//   - Acked records are not scanned again, except when the ack file itself
//     is damaged (Stats.AckLost): then every record still on disk is. Records
//     of a partly acked segment stay on disk, skipped, until all of it is
//     acked; a crash between writing the ack file and removing segments
//     leaves files Open removes.
//   - A Fold is atomic: the fold file, once renamed into place, replaces
//     every record in its range wherever those still are, and originals are
//     removed only after it is durable. A reopened journal holds either the
//     original records or the folded one, never both and never neither.
//
// A consumer must still apply records idempotently: a crash between applying
// a record and acking it scans it again.
//
// # Fold
//
// Fold(upTo, fold) hands fold the records after Acked() that end at or
// before upTo and replaces them with the one record fold returns, which
// ends where the last of them ended. The fold file names the range it
// replaces; of several fold files the one ending last (then the latest
// generation) wins. The segment the range ends in is kept (its records
// after the range are still to scan) with its folded records skipped, so
// the bytes Fold gives back are those of the whole segments before it:
// with the default segment size (MaxBytes/16, from 64 KiB to 4 MiB) that
// is all but about a sixteenth of a capped journal. Folding up to End()
// removes every segment. The fold file is written before anything is
// removed, so Fold needs room for it (it may take the journal past
// MaxBytes by that much, and fails with nothing changed when the disk is
// full). The same holds for Ack: it gives space back a whole segment at a
// time, so dropping the oldest record alone may free nothing.
//
// # Memory
//
// Open checks the CRC of every record not yet acked, reading the journal
// once with a 64 KiB buffer (about 2 GB/s from the page cache; from disk,
// at the disk's speed). Scan reads with a 64 KiB buffer and holds one
// record at a time, so memory is bounded by the largest record plus about
// 128 KiB, whatever the journal's size. The
// Journal keeps per segment file a few words, plus one pair of offsets per
// damaged region Open found.
//
// # Concurrency
//
// A Journal is safe for concurrent use. Appends are serialized (one sync at
// a time). A Scan reads the journal as it was when it started — a
// consistent prefix of the appends — and Appends, Acks and Folds during
// it do not change what it returns; files it still has to read are removed
// only once it is done with them. Ack and Fold are serialized with each
// other. fn in Scan may call any method but Close; fold in Fold may call
// Append but not Ack or Fold.
package journal
