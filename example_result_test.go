package asynctool_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/asynctool-go/asynctool"
)

// A result goes through JSON with its error: the message, and the
// errors it matched.
func ExampleWorkResult_MarshalJSON() {
	r := asynctool.WorkResult[int]{Value: -1, State: asynctool.ResultTimeout, Err: fmt.Errorf("price of sku 7: %w", context.DeadlineExceeded)}
	b, _ := json.Marshal(r)
	fmt.Println(string(b))

	var back asynctool.WorkResult[int]
	_ = json.Unmarshal(b, &back)
	fmt.Println(back.Value, back.State, back.Err, errors.Is(back.Err, context.DeadlineExceeded))
	// Output:
	// {"Value":-1,"State":2,"Err":{"Text":"price of sku 7: context deadline exceeded","Matches":["context.DeadlineExceeded"]}}
	// -1 timeout price of sku 7: context deadline exceeded true
}
