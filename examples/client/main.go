// Command client is the README's example of the official Go client (github.com/openai/openai-go/v3)
// against `codellm serve`: it sends one bash block and prints the tool calls codellm answers with. The
// lines between "README:" and "end README" are the README's, as printed (examples_test.go checks it and
// runs this program against a serve).
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

func main() {
	ctx := context.Background()
	// README:
	client := openai.NewClient(option.WithBaseURL("http://127.0.0.1:8080/v1/"), option.WithAPIKey(os.Getenv("CODELLM_API_KEY")))
	resp, err := client.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
		Model:    "codellm",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("```bash\necho '{\"answer\":\"hi\"}'\n```")},
	})
	// resp.Choices[0].Message.ToolCalls: finish {"answer":"hi"}
	// end README
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	for _, c := range resp.Choices[0].Message.ToolCalls {
		fmt.Println(c.Function.Name, c.Function.Arguments)
	}
}
