//go:build !(linux && cgo)

package cpuwork

import (
	"fmt"
	"os"
)

// cgoQuotaChild needs cgo on Linux (fraction_cgo_test.go).
func cgoQuotaChild(string) {
	fmt.Println(`{"err":"cgo children need cgo on linux"}`)
	os.Exit(1)
}
