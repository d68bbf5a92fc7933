const message: string = "OK";
console.log(message);
