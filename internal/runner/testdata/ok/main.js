console.log("OK");
