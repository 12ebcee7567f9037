package journal_test

import (
	"fmt"
	"log"
	"os"
	"strconv"

	"github.com/linkgate/linkgate/journal"
)

func Example() {
	dir, err := os.MkdirTemp("", "journal")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	j, err := journal.Open(dir, journal.Options{MaxBytes: 1 << 20})
	if err != nil {
		log.Fatal(err)
	}
	defer j.Close()

	// While the store fails, each interval's counts are appended.
	for _, counts := range []string{"3", "5", "2"} {
		if _, err := j.Append([]byte(counts)); err != nil {
			log.Fatal(err)
		}
	}
	// At the cap, the oldest are folded into one record.
	var ends []journal.Pos
	j.Scan(j.Acked(), func(end journal.Pos, _ []byte) error {
		ends = append(ends, end)
		return nil
	})
	err = j.Fold(ends[1], func(recs func(func([]byte) bool)) ([]byte, error) {
		sum := 0
		for r := range recs {
			n, err := strconv.Atoi(string(r))
			if err != nil {
				return nil, err
			}
			sum += n
		}
		return []byte(strconv.Itoa(sum)), nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Once the store is back, they are replayed and acked one by one.
	err = j.Scan(j.Acked(), func(end journal.Pos, rec []byte) error {
		fmt.Printf("apply %s\n", rec)
		return j.Ack(end)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("bytes left:", j.Bytes())
	// Output:
	// apply 8
	// apply 2
	// bytes left: 0
}
