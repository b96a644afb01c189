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

// ValueIn and ResultIn read a run of single-use wrappers too, the Run
// that Start returns, as they read a plan's: code that takes a *Run reads
// both alike. A single-use wrapper's Result reads the same run.
func ExampleWorkerWrapper_ValueIn_singleUse() {
	a := asynctool.New()
	defer a.Close()
	price := asynctool.NewWrapper("price", asynctool.WorkerFunc[string, int](func(context.Context, string, asynctool.Wrappers) (int, error) {
		return 42, nil
	}), "sku-7")
	run, err := a.Start(context.Background(), 0, price)
	if err != nil {
		panic(err)
	}
	if err := run.Wait(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println(price.ValueIn(run))
	fmt.Println(price.ResultIn(run).Value == price.Result().Value)
	// Output:
	// 42 <nil>
	// true
}
