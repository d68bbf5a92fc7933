package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// rateParams is the --rate mode: real sandboxes behind the URL, the same program from c clients for d,
// to compare a hub in front of workers with a `codellm serve` at the same concurrency
// (bench/hubload/throughput.sh runs both).
type rateParams struct {
	url, api, key, program string
	c                      int
	d                      time.Duration
}

// rateResult is one --rate run.
type rateResult struct {
	API        string  `json:"api"`
	Clients    int     `json:"clients"`
	Seconds    float64 `json:"seconds"`
	OK, Failed int
	PerSecond  float64 `json:"perSecond"`
	P50, P90   float64 // seconds
}

// rateRequest builds one request: the hub's /v1/exec or serve's /api/v2/execute (Piston).
func rateRequest(rp rateParams) (*http.Request, error) {
	var body any
	path := "/v1/exec"
	if rp.api == "piston" {
		path = "/api/v2/execute"
		body = map[string]any{"language": "python", "version": "*", "files": []map[string]string{{"content": rp.program}}}
	} else {
		body = map[string]string{"lang": "py", "code": rp.program}
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequest(http.MethodPost, rp.url+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if rp.key != "" {
		req.Header.Set("Authorization", "Bearer "+rp.key)
	}
	return req, nil
}

func rate(rp rateParams) (*rateResult, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: rp.c}, Timeout: time.Minute}
	res := &rateResult{API: rp.api, Clients: rp.c}
	var mu sync.Mutex
	var lat []float64
	start := time.Now()
	end := start.Add(rp.d)
	var wg sync.WaitGroup
	for range rp.c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				req, err := rateRequest(rp)
				if err != nil {
					return
				}
				t0 := time.Now()
				resp, err := client.Do(req)
				ok := err == nil && resp.StatusCode == http.StatusOK
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				mu.Lock()
				if ok {
					res.OK++
					lat = append(lat, time.Since(t0).Seconds())
				} else {
					res.Failed++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.PerSecond = float64(res.OK) / res.Seconds
	slices.Sort(lat)
	if len(lat) > 0 {
		res.P50, res.P90 = lat[len(lat)/2], lat[len(lat)*9/10]
	}
	if res.OK == 0 {
		return res, fmt.Errorf("no request succeeded (%d failed)", res.Failed)
	}
	return res, nil
}
