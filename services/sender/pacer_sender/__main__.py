from pacer_sender.main import main

main()
